"""Transient servers: revocation, availability and price models fitted on real spot traces.

>>> from spottrain.transience import lifetime_model, expected_revocations
>>> m = lifetime_model("gcp", "K80")          # best-by-AIC law, GCP preemptible K80
>>> m.name, m.pooled_from                       # doctest: +SKIP
('weibull', None)
"""

from spottrain.transience.events import Trace, TraceEvent, load_user_trace
from spottrain.transience.lifetimes import Lifetimes, node_lifetimes
from spottrain.transience.models import (
    BathtubLifetime,
    ExponentialLifetime,
    KaplanMeier,
    LifetimeModel,
    WeibullLifetime,
)
from spottrain.transience.select import FittedLifetime, fit_models, lifetime_model
from spottrain.transience.traces import list_traces, load_trace

__all__ = [
    "BathtubLifetime", "ExponentialLifetime", "FittedLifetime", "KaplanMeier", "LifetimeModel",
    "Lifetimes", "Trace", "TraceEvent", "WeibullLifetime", "fit_models", "lifetime_model",
    "list_traces", "load_trace", "load_user_trace", "node_lifetimes",
]

from spottrain.transience.availability import (  # noqa: E402
    Availability,
    GroupOutage,
    ReplacementDelay,
    availability,
    group_outage,
    replacement_delay,
    startup_times_s,
)
from spottrain.transience.checkpoint_interval import (  # noqa: E402
    daly_interval_s,
    expected_overhead,
    optimal_checkpoint_interval_s,
    transience_cost,
    young_daly_interval_s,
)
from spottrain.transience.renewal import (  # noqa: E402
    cluster_survival,
    expected_revocations,
    renewal_function,
)

__all__ += [
    "Availability", "GroupOutage", "ReplacementDelay", "availability", "group_outage", "cluster_survival",
    "daly_interval_s",
    "expected_overhead", "expected_revocations", "optimal_checkpoint_interval_s",
    "renewal_function", "replacement_delay", "startup_times_s", "transience_cost",
    "young_daly_interval_s",
]
