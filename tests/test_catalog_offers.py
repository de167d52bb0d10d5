"""Offers checked against the shipped raw rows (read here with the csv module, not the loader)."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

import spottrain
from spottrain.catalog import gpu_spec, load_catalog, network_gbps_for_gpu, sort_offers, spot_price_snapshot
from spottrain.errors import UnknownNameError

DATA = Path(spottrain.__file__).parent / "data" / "catalog"


def raw_rows(name):
    with (DATA / name).open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_p3_2xlarge_is_one_v100_with_raw_prices(cat):
    offers = cat.instance("p3.2xlarge")
    assert offers and all(o.gpu == "V100" and o.gpu_count == 1 and o.cloud == "aws" for o in offers)
    raw = {r["AvailabilityZone"]: r for r in raw_rows("aws_vms.csv")
           if r["InstanceType"] == "p3.2xlarge" and r["Region"] == "us-east-1"}
    east = [o for o in offers if o.region == "us-east-1"]
    assert {o.zone for o in east} == set(raw)
    with_spot = [o for o in east if o.spot_price_usd_per_hour is not None]
    assert with_spot, "us-east-1 has spot prices for p3.2xlarge"
    for o in east:
        assert o.price_usd_per_hour == pytest.approx(float(raw[o.zone]["Price"]))
    for o in with_spot:
        assert o.spot_price_usd_per_hour == pytest.approx(float(raw[o.zone]["SpotPrice"]))
        assert o.spot_price_usd_per_hour < o.price_usd_per_hour


def test_gcp_v100_offers_exist_per_zone(cat):
    offers = cat.query(cloud="gcp", gpu="V100")
    raw_zones = {r["AvailabilityZone"] for r in raw_rows("gcp_vms.csv") if r["AcceleratorName"] == "V100"}
    assert offers and {o.zone for o in offers} == raw_zones
    assert all(o.instance_type.startswith("n1-") and "estimated" in o.source for o in offers)


def test_gcp_a2_price_is_host_plus_gpu_row(cat):
    rows = raw_rows("gcp_vms.csv")
    host = next(r for r in rows if r["InstanceType"] == "a2-highgpu-1g")
    gpu = next(r for r in rows if not r["InstanceType"] and r["AcceleratorName"] == "A100"
               and r["AcceleratorCount"] in ("1", "1.0") and r["AvailabilityZone"] == host["AvailabilityZone"])
    offer = next(o for o in cat.instance("a2-highgpu-1g") if o.zone == host["AvailabilityZone"])
    assert offer.gpu == "A100" and offer.gpu_count == 1
    assert offer.price_usd_per_hour == pytest.approx(float(host["Price"]) + float(gpu["Price"]))
    assert offer.spot_price_usd_per_hour == pytest.approx(float(host["SpotPrice"]) + float(gpu["SpotPrice"]))


def test_flopp_ranks_t4_above_v100_on_demand(cat):
    t4 = next(o for o in cat.query(instance_type="g4dn.xlarge", region="us-east-1"))
    v100 = next(o for o in cat.query(instance_type="p3.2xlarge", region="us-east-1"))
    assert t4.flopp() == pytest.approx(gpu_spec("T4").fp32_tflops / t4.price_usd_per_hour)
    assert v100.flopp() == pytest.approx(gpu_spec("V100").fp32_tflops / v100.price_usd_per_hour)
    ranked = sort_offers([v100, t4], by="flopp")
    assert ranked == [t4, v100]
    assert sort_offers([t4, v100], by="price") == [t4, v100]


def test_flopp_without_spot_price_is_nan(cat):
    no_spot = next(o for o in cat.offers if o.spot_price_usd_per_hour is None)
    assert math.isnan(no_spot.flopp(spot=True))
    assert no_spot not in cat.query(spot=True)


def test_three_clouds_and_retired_gpus_filled_from_fsdl(cat):
    assert cat.clouds() == ["aws", "azure", "gcp"]
    filled = [o for o in cat.offers if o.source.startswith("fsdl")]
    assert {(o.cloud, o.gpu) for o in filled} >= {("aws", "K80"), ("gcp", "K80")}
    # Filled pairs are only those the SkyPilot snapshot lacks.
    sky_pairs = {(o.cloud, o.gpu) for o in cat.offers if not o.source.startswith("fsdl")}
    assert not {(o.cloud, o.gpu) for o in filled} & sky_pairs


def test_every_offer_gpu_has_a_spec_and_sane_values(cat):
    for o in cat.offers:
        gpu_spec(o.gpu)
        assert o.gpu_count >= 1 and o.price_usd_per_hour > 0 and o.network_gbps > 0


def test_network_from_ec2_data_and_documented_rules(cat):
    aws_types = {r["instance_type"]: r for r in raw_rows_commented("aws_instance_types.csv")}
    p3 = cat.instance("p3.2xlarge")[0]
    assert aws_types["p3.2xlarge"]["network_performance"] == "Up to 10 Gigabit"
    assert p3.network_gbps == float(aws_types["p3.2xlarge"]["baseline_gbps"]) and not p3.network_estimated
    assert cat.instance("p4d.24xlarge")[0].network_gbps == 400
    n1 = cat.query(cloud="gcp", gpu="V100")[0]
    assert n1.network_estimated and n1.network_gbps == min(2 * n1.vcpus, 32)
    assert network_gbps_for_gpu("V100") > 0


def raw_rows_commented(name):
    lines = [line for line in (DATA / name).read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def test_named_spot_snapshot():
    rows = spot_price_snapshot("aws-2022-05-31")
    assert len(rows) == len((DATA / "aws_spot_2022-05-31.tsv").read_text().splitlines())
    p3 = [r for r in rows if r[1] == "p3.2xlarge"]
    assert p3 and all(r[3].startswith("2022-05-31") and r[2] > 0 for r in p3)
    with pytest.raises(UnknownNameError):
        spot_price_snapshot("aws-2022")


def test_unknown_names_suggest_near_miss(cat):
    with pytest.raises(UnknownNameError, match="did you mean p3.2xlarge"):
        cat.instance("p3.2xlarg")
    with pytest.raises(UnknownNameError, match="did you mean us-central1"):
        cat.query(region="us-centrl1")
    with pytest.raises(UnknownNameError, match="did you mean gcp"):
        cat.query(cloud="gpc")


def test_catalog_age_and_snapshots(cat):
    names = {s.name for s in cat.snapshots}
    assert {"skypilot-v8", "aws-2022-05-31", "fsdl-cloud-gpus"} <= names
    assert cat.age_days() >= 0


def test_cold_load_is_fast():
    code = ("import time; t = time.perf_counter(); from spottrain.catalog import load_catalog; "
            "load_catalog(); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 1.0  # typically ~0.1 s; generous for slow CI machines
