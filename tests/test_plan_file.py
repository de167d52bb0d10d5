import json

import pytest

from spottrain.errors import InputError, SchemaVersionError
from spottrain.plan_file import Plan, PlanGroup, PlanPrediction, PlanWorkload


def make_plan():
    return Plan(
        workload=PlanWorkload(model="resnet50", batch_size=64, samples_total=1.28e6 * 90,
                              flops_per_sample=24.6e9, param_count=25_557_032, gradient_bytes=102e6),
        groups=(PlanGroup(cloud="aws", instance_type="p3.2xlarge", gpu="V100", gpus_per_node=1, count=4,
                          spot=True, region="us-east-1", zone="use1-az1", price_usd_per_hour=0.92,
                          on_demand_price_usd_per_hour=3.06, network_gbps=10.0),),
        ps=0, sync="sync",
        prediction=PlanPrediction(throughput_samples_per_s=1200, throughput_low=1100, throughput_high=1300,
                                  duration_s=3600 * 7, duration_p95_s=3600 * 7.8, cost_usd=30, cost_p95_usd=34,
                                  p_meet_deadline=0.97, bottleneck="compute", expected_revocations=1.2),
        checkpoint_interval_s=900, deadline_s=8 * 3600,
    )


def test_roundtrip(tmp_path):
    plan = make_plan()
    path = plan.save(tmp_path / "plan.json")
    assert Plan.load(path) == plan
    assert plan.cluster == "4xV100" and plan.nodes == 4


def test_precision_roundtrips_and_a_plan_saved_without_it_is_fp32(tmp_path):
    import dataclasses

    plan = make_plan()
    mixed = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, precision="fp16"))
    assert Plan.load(mixed.save(tmp_path / "mixed.json")).workload.precision == "fp16"
    older = plan.to_dict()
    del older["workload"]["precision"]
    assert Plan.from_dict(older).workload.precision == "fp32"
    older["workload"]["precision"] = "fp8"
    with pytest.raises(InputError, match="precision"):
        Plan.from_dict(older)


def test_refuses_to_overwrite(tmp_path):
    plan = make_plan()
    plan.save(tmp_path / "plan.json")
    with pytest.raises(InputError, match="exists"):
        plan.save(tmp_path / "plan.json")


def test_other_schema_version_refused(tmp_path):
    data = make_plan().to_dict()
    data["schema_version"] = 99
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(SchemaVersionError, match="version 99"):
        Plan.load(tmp_path / "p.json")


def test_broken_json_names_line(tmp_path):
    (tmp_path / "p.json").write_text('{\n "kind": \n')
    with pytest.raises(InputError, match="line"):
        Plan.load(tmp_path / "p.json")
