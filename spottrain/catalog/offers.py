"""Offers (one instance type in one region/zone at a price) and the queryable catalog.

FLOPP (DeepVM, CCGrid 2024) ranks instances by floating-point operations per price unit:
``flopp = peak FP32 TFLOPS of the GPUs / price in USD per hour`` (TFLOPS per $/h), with the
on-demand or the spot price.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

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
