"""The instance catalog: GPU specs, cloud offers (price per region/zone), network bandwidth.

Entry points: :func:`gpu_spec`, :func:`canonical_gpu`, :func:`gpu_label`, :func:`known_gpus` (the GPU registry) and
:func:`load_catalog` (offers from AWS, GCP and Azure; see ``docs/catalog.md``).

Example::

    >>> from spottrain.catalog import load_catalog, sort_offers
    >>> best = sort_offers(load_catalog().query(gpu="V100", spot=True), by="flopp", spot=True)[0]
"""

from spottrain.catalog.gpus import GpuSpec, canonical_gpu, gpu_label, gpu_spec, known_gpus
from spottrain.catalog.loader import load_catalog, network_gbps_for_gpu, spot_price_snapshot
from spottrain.catalog.network import instance_network_gbps
from spottrain.catalog.offers import CLOUDS, Catalog, Offer, Snapshot, sort_offers

__all__ = [
    "CLOUDS",
    "Catalog",
    "GpuSpec",
    "Offer",
    "Snapshot",
    "canonical_gpu",
    "gpu_label",
    "gpu_spec",
    "instance_network_gbps",
    "known_gpus",
    "load_catalog",
    "network_gbps_for_gpu",
    "sort_offers",
    "spot_price_snapshot",
]
