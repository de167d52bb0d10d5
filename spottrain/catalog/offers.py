"""Offers (one instance type in one region/zone at a price) and the queryable catalog.

FLOPP (DeepVM, CCGrid 2024) ranks instances by floating-point operations per price unit:
``flopp = peak FP32 TFLOPS of the GPUs / price in USD per hour`` (TFLOPS per $/h), with the
on-demand or the spot price.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from spottrain.catalog.gpus import canonical_gpu, gpu_spec
from spottrain.errors import UnknownNameError

CLOUDS = ("aws", "gcp", "azure")


@dataclass(frozen=True, kw_only=True)
class Offer:
    """One GPU instance type offered in one region (and zone, where the cloud has zones)."""

    cloud: str
    """``"aws"``, ``"gcp"`` or ``"azure"``."""
    instance_type: str
    """The cloud's name, e.g. ``"p3.2xlarge"``, ``"n1-highmem-8"``, ``"Standard_NC6s_v3"``."""
    gpu: str
    """Canonical GPU name (see :func:`~spottrain.catalog.gpu_spec`)."""
    gpu_count: int
    vcpus: float
    memory_gib: float
    region: str
    zone: str | None
    """Zone (AWS: availability-zone ID such as ``use1-az1``); ``None`` where priced per region."""
    price_usd_per_hour: float
    """On-demand price of the whole instance."""
    spot_price_usd_per_hour: float | None
    """Spot / preemptible price; ``None`` where not offered."""
    network_gbps: float
    """Sustained network bandwidth (see :mod:`spottrain.catalog.network`)."""
    network_estimated: bool
    """True where ``network_gbps`` is a documented cap or default rather than the vendor's figure."""
    source: str
    """Which data set (and derivation) the row comes from."""

    @property
    def peak_fp32_tflops(self) -> float:
        """Peak FP32 TFLOPS of all GPUs of the instance."""
        return gpu_spec(self.gpu).fp32_tflops * self.gpu_count

    def price(self, spot: bool = False) -> float | None:
        """The on-demand price, or the spot price (``None`` if there is none)."""
        return self.spot_price_usd_per_hour if spot else self.price_usd_per_hour

    def flopp(self, spot: bool = False) -> float:
        """DeepVM's FLOPP: peak FP32 TFLOPS per USD/hour; NaN without a (positive) price."""
        price = self.price(spot)
        if price is None or price <= 0:
            return math.nan
        return self.peak_fp32_tflops / price

    def to_dict(self) -> dict:
        """JSON-ready dict (the ``spottrain catalog --json`` schema)."""
        flopp = self.flopp()
        flopp_spot = self.flopp(spot=True)
        return {
            "cloud": self.cloud,
            "instance_type": self.instance_type,
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "vcpus": self.vcpus,
            "memory_gib": self.memory_gib,
            "region": self.region,
            "zone": self.zone,
            "price_usd_per_hour": self.price_usd_per_hour,
            "spot_price_usd_per_hour": self.spot_price_usd_per_hour,
            "network_gbps": self.network_gbps,
            "network_estimated": self.network_estimated,
            "flopp": None if math.isnan(flopp) else round(flopp, 4),
            "flopp_spot": None if math.isnan(flopp_spot) else round(flopp_spot, 4),
            "source": self.source,
        }


@dataclass(frozen=True)
class Snapshot:
    """Where and when one data set of the catalog was taken."""

    name: str
    date: str
    """ISO date."""
    date_kind: str
    """What the date means: ``retrieved``, ``prices reviewed``, ``observed``, ``file modified``."""
    description: str

    def age_days(self, today: dt.date | None = None) -> int:
        """Days between the snapshot date and ``today``."""
        today = today or dt.date.today()
        return (today - dt.date.fromisoformat(self.date)).days


# --------------------------------------------------------------------------- price outliers

OUTLIER_Z = 3.5
"""Robust z-score (deviation from the peers' median log price, in MAD units) beyond which a spot
price is flagged (Iglewicz and Hoaglin's modified z-score cut-off)."""
OUTLIER_MIN_FACTOR = 2.0
"""...and only when it is at least this factor away from the peers' median price: zones of one
region often differ by 10-30 %, which is no reason to distrust a price."""
MAD_FLOOR = math.log(1.25)
"""Least spread (in log price) assumed among the peers, so that identical peer prices do not
make every small difference an outlier."""
DISCOUNT_FACTOR = 0.5
"""A low price is flagged only when its spot/on-demand ratio is also below this share of the
type's median spot/on-demand ratio over all its offers (an unusually deep discount)."""
MIN_PEERS = 2
"""Other zones of the region with a spot price that a zone is compared with."""


@dataclass(frozen=True, kw_only=True)
class PriceOutlier:
    """A zone's spot price that disagrees with the same type's other zones of its region (and,
    when low, with its on-demand price). See :func:`price_outliers` for the rule."""

    cloud: str
    instance_type: str
    region: str
    zone: str | None
    spot_price_usd_per_hour: float
    peer_median_usd_per_hour: float
    peer_low_usd_per_hour: float
    peer_high_usd_per_hour: float
    peers: int
    on_demand_usd_per_hour: float
    z: float
    """Robust z-score of the log price against the peers (negative: cheaper)."""

    @property
    def low(self) -> bool:
        return self.z < 0

    def reason(self) -> str:
        """``'spot $2.47/h vs $7.88-8.19/h in 3 other zones of us-east-1 (on-demand $21.96/h)'``."""
        where = self.zone or self.region
        return (f"{self.instance_type} spot in {where} at ${self.spot_price_usd_per_hour:.2f}/h vs "
                f"${self.peer_low_usd_per_hour:.2f}-{self.peer_high_usd_per_hour:.2f}/h in {self.peers} other zones "
                f"of {self.region} (on-demand ${self.on_demand_usd_per_hour:.2f}/h; robust z {self.z:+.1f})")

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "reason": self.reason()}


def offer_key(o: Offer) -> tuple:
    """Identity of one offer row: cloud, instance type, GPU, GPU count, region, zone."""
    return (o.cloud, o.instance_type, o.gpu, o.gpu_count, o.region, o.zone)


def price_outliers(offers: Iterable[Offer]) -> dict[tuple, PriceOutlier]:
    """Spot prices of single zones that are not plausible, by :func:`offer_key`.

    The rule (documented in docs/catalog.md): for each offer with a spot price, its *peers* are the
    other zones of the same region offering the same node (cloud, instance type, GPU and count)
    with a spot price; at least :data:`MIN_PEERS` are needed. With ``d = ln p - median(ln peers)``
    and ``s = max(1.4826 * MAD(ln peers), ln 1.25)``, the price is an outlier when
    ``|d| / s > 3.5`` and ``|d| >= ln 2`` (at least twice or half the peers' median). A low price
    must also be an unusually deep discount: its spot/on-demand ratio below half the type's median
    ratio over all its offers. Deterministic and order-independent.

    >>> out = price_outliers(load_catalog().offers)                  # doctest: +SKIP
    >>> out[("aws", "p4d.24xlarge", "A100", 8, "us-east-1", "use1-az1")].reason()  # doctest: +SKIP
    """
    groups: dict[tuple, list[Offer]] = {}
    for o in offers:
        if o.spot_price_usd_per_hour is not None and o.spot_price_usd_per_hour > 0:
            groups.setdefault((o.cloud, o.instance_type, o.gpu, o.gpu_count), []).append(o)
    out: dict[tuple, PriceOutlier] = {}
    for offs in groups.values():
        ratios = [x.spot_price_usd_per_hour / x.price_usd_per_hour for x in offs if x.price_usd_per_hour > 0]
        ratio_med = statistics.median(ratios) if ratios else None
        by_region: dict[str, list[Offer]] = {}
        for o in offs:
            by_region.setdefault(o.region, []).append(o)
        for region_offs in by_region.values():
            if len(region_offs) < MIN_PEERS + 1:
                continue
            for o in region_offs:
                peers = [x.spot_price_usd_per_hour for x in region_offs if x is not o]
                logs = [math.log(p) for p in peers]
                med = statistics.median(logs)
                scale = max(1.4826 * statistics.median([abs(v - med) for v in logs]), MAD_FLOOR)
                d = math.log(o.spot_price_usd_per_hour) - med
                z = d / scale
                if abs(z) <= OUTLIER_Z or abs(d) < math.log(OUTLIER_MIN_FACTOR):
                    continue
                if d < 0:
                    if ratio_med is None or o.price_usd_per_hour <= 0:
                        continue
                    if o.spot_price_usd_per_hour / o.price_usd_per_hour >= DISCOUNT_FACTOR * ratio_med:
                        continue
                out[offer_key(o)] = PriceOutlier(
                    cloud=o.cloud, instance_type=o.instance_type, region=o.region, zone=o.zone,
                    spot_price_usd_per_hour=o.spot_price_usd_per_hour, peer_median_usd_per_hour=math.exp(med),
                    peer_low_usd_per_hour=min(peers), peer_high_usd_per_hour=max(peers), peers=len(peers),
                    on_demand_usd_per_hour=o.price_usd_per_hour, z=z)
    return out


def without_outlier_spot_prices(offers: Sequence[Offer], outliers: dict[tuple, PriceOutlier]) -> list[Offer]:
    """``offers`` with the spot price of every flagged offer removed (its on-demand price stays
    usable): what the planner sees unless ``--include-outliers``."""
    return [replace(o, spot_price_usd_per_hour=None) if offer_key(o) in outliers else o for o in offers]


@dataclass(frozen=True)
class Catalog:
    """All offers, with the snapshots they come from. Build it with :func:`load_catalog`."""

    offers: tuple[Offer, ...]
    snapshot_date: str
    """Date of the primary price snapshot (ISO)."""
    source: str
    snapshots: tuple[Snapshot, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)
    """Rows left out while loading, by reason (e.g. accelerators that are not GPUs)."""

    def age_days(self, today: dt.date | None = None) -> int:
        """Age of the primary snapshot in days."""
        today = today or dt.date.today()
        return (today - dt.date.fromisoformat(self.snapshot_date)).days

    @functools.cached_property
    def spot_outliers(self) -> dict[tuple, PriceOutlier]:
        """Implausible single-zone spot prices (:func:`price_outliers`), by :func:`offer_key`."""
        return price_outliers(self.offers)

    def clouds(self) -> list[str]:
        """Clouds present in the catalog."""
        return sorted({o.cloud for o in self.offers})

    def query(
        self,
        *,
        cloud: str | None = None,
        gpu: str | None = None,
        region: str | None = None,
        zone: str | None = None,
        spot: bool = False,
        instance_type: str | None = None,
    ) -> list[Offer]:
        """Offers matching every given filter; ``spot=True`` keeps offers with a spot price.

        Unknown names raise :class:`~spottrain.errors.UnknownNameError` with the near miss.
        """
        offers = list(self.offers)
        if cloud is not None:
            cloud = cloud.lower()
            if cloud not in CLOUDS:
                raise UnknownNameError("cloud", cloud, CLOUDS)
            offers = [o for o in offers if o.cloud == cloud]
        if gpu is not None:
            canonical = canonical_gpu(gpu)
            offers = [o for o in offers if o.gpu == canonical]
        if instance_type is not None:
            self._check_known("instance type", instance_type, {o.instance_type for o in self.offers})
            offers = [o for o in offers if o.instance_type == instance_type]
        if region is not None:
            self._check_known("region", region, {o.region for o in self.offers})
            offers = [o for o in offers if o.region == region]
        if zone is not None:
            self._check_known("zone", zone, {o.zone for o in self.offers if o.zone})
            offers = [o for o in offers if o.zone == zone]
        if spot:
            offers = [o for o in offers if o.spot_price_usd_per_hour is not None]
        return offers

    def instance(self, instance_type: str) -> list[Offer]:
        """Every offer of ``instance_type`` (all regions/zones); near-miss error if unknown."""
        return self.query(instance_type=instance_type)

    @staticmethod
    def _check_known(kind: str, name: str, known: set[str]) -> None:
        if name not in known:
            raise UnknownNameError(kind, name, known)


def sort_offers(offers: list[Offer], *, by: str = "price", spot: bool = False) -> list[Offer]:
    """Offers sorted by ``price`` (cheapest first) or ``flopp`` (most TFLOPS per $/h first).

    Offers without the relevant price go last.
    """
    if by == "price":
        def key(o: Offer) -> tuple:
            p = o.price(spot)
            return (p is None, p if p is not None else 0.0, o.cloud, o.instance_type, o.region, o.zone or "")
    elif by == "flopp":
        def key(o: Offer) -> tuple:
            f = o.flopp(spot)
            return (math.isnan(f), -f if not math.isnan(f) else 0.0, o.cloud, o.instance_type, o.region, o.zone or "")
    else:
        raise UnknownNameError("sort key", by, ("price", "flopp"))
    return sorted(offers, key=key)
