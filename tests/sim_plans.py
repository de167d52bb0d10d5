"""Plans for the simulator, runtime and policy tests, built directly (16 x p3.2xlarge spot and friends)."""

from __future__ import annotations

from spottrain.plan_file import Plan, PlanGroup, PlanPrediction, PlanWorkload


def make_plan(*, nodes: int = 16, hours: float = 24.0, deadline_h: float | None = 36.0, sync: str = "sync",
              instance_type: str = "p3.2xlarge", gpu: str = "V100", cloud: str = "aws",
              zone: str = "us-west-2b", region: str | None = None, price: float = 0.918, on_demand: float = 3.06,
              spot: bool = True, interval_s: float = 1800.0, policy: str = "replace-same", ps: int = 0,
              extra: dict | None = None) -> Plan:
    """A plan whose failure-free duration is ``hours`` at 400 samples/s per node (``region``:
    default the zone name less its letter; give it for an AWS zone id such as use1-az1)."""
    tp = 400.0 * nodes
    return Plan(
        workload=PlanWorkload(model="resnet50", batch_size=64, samples_total=tp * hours * 3600,
                              flops_per_sample=12.3e9, param_count=25_600_000, gradient_bytes=102.4e6),
        groups=(PlanGroup(cloud=cloud, instance_type=instance_type, gpu=gpu, gpus_per_node=1, count=nodes,
                          spot=spot, region=region or zone[:-1], zone=zone,
                          price_usd_per_hour=price if spot else on_demand,
                          on_demand_price_usd_per_hour=on_demand, network_gbps=10.0),),
        ps=ps, sync=sync,
        prediction=PlanPrediction(throughput_samples_per_s=tp, throughput_low=tp * 0.9, throughput_high=tp * 1.1,
                                  duration_s=hours * 3600, duration_p95_s=hours * 3600 * 1.2,
                                  cost_usd=price * nodes * hours, cost_p95_usd=price * nodes * hours * 1.2,
                                  p_meet_deadline=None, bottleneck="compute", expected_revocations=0.0),
        checkpoint_interval_s=interval_s, deadline_s=None if deadline_h is None else deadline_h * 3600,
        policy=policy, extra=extra or {},
    )


def write_trace(path, rows, *, gpu: str = "V100", cloud: str = "aws", kind: str = "alive",
                duration_s: float | None = None, instance_type: str = "p3.2xlarge") -> str:
    """Write a synthetic user trace CSV (time_s, source, event, value)."""
    lines = [f"# cloud: {cloud}", f"# gpu: {gpu}", f"# kind: {kind}", f"# instance_type: {instance_type}"]
    if duration_s is not None:
        lines.append(f"# duration_s: {duration_s}")
    lines.append("time_s,source,event,value")
    lines += [",".join(str(x) for x in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)
