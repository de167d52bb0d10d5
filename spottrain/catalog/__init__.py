"""The instance catalog: GPU specs, cloud offers (price per region/zone), network bandwidth.

Entry points: :func:`gpu_spec`, :func:`canonical_gpu`, :func:`known_gpus` (GPU table) and
:func:`load_catalog` (offers from AWS, GCP and Azure; see ``docs/catalog.md``).
"""

from spottrain.catalog.gpus import GpuSpec, canonical_gpu, gpu_spec, known_gpus

__all__ = ["GpuSpec", "canonical_gpu", "gpu_spec", "known_gpus"]
