#!/usr/bin/env python3
"""Convert published training-speed measurements into spottrain measurement tables.

Reads the raw copies under ``../shared/data`` (or ``--data DIR``) and writes CSV files in the
measurement-table interface (``model, batch_size, cluster, ps, sync, throughput`` plus
``network_gbps, flops_per_sample, param_count, precision, source``) to
``spottrain/data/measurements/``::

    python tools/convert_measurements.py --data ../shared/data --out spottrain/data/measurements
    python tools/convert_measurements.py --params-only     # refit the default model's saved parameters

Assumptions (also written in spottrain/data/measurements/SOURCE.md):

* CM-DARE and transient-dl ran Tensor2Tensor's CIFAR-10 image models with the default
  ``batch_size = 128`` per worker (``resnet_base`` / ``shakeshake_small`` hparams). Their
  TensorBoard ``global_step/sec`` counts every worker step, so cluster throughput in samples/s
  is ``steps/s * 128``. The single-worker ResNet-32 K80 rate in transient-dl (4000 steps in
  ~864 s = 4.63 steps/s) matches CM-DARE's 4.59 steps/s, which supports reading both the same way.
* CM-DARE's ``Model FLOPs`` (TFProf) is taken as forward + backward FLOPs of one training sample
  (ResNet-32 with 32/64/128 filters: 1.66 GFLOPs = about 3x its forward FLOPs).
* A steady-state rate is the median over the reported intervals after dropping the first 10 %
  (warm-up). Runs with revocations (spot clusters) are not used for cluster sizes.
* Lambda: per-GPU batch size = the matching ``-bs-`` table's cell / num_gpu (the cells are the
  machine's global batch: they double from 1 to 2 GPUs); FLOPs per sample are
  published estimates (ResNet-50 at 224x224: 4.1 GMAC forward; BERT on SQuAD at sequence
  length 384, FLOPs = 2 x non-embedding parameters per token plus attention), times 3 for
  forward + backward. SSD300 (ResNet-50 backbone, Lambda's ``ssd``): its layers rebuilt and its
  FLOPs counted by ``tools/count_ssd300_flops.py``. Only models whose unit is samples (images or
  sequences) per second are kept: GNMT and Transformer-XL count tokens, Tacotron2 and WaveGlow
  audio frames and samples, whose FLOPs per unit depend on sequence lengths the tables do not give;
  NCF's cells (millions of samples a step; 2-8 GPU H100 cells at up to 340x the 1-GPU rate) are left
  out whole.
* Pollux (petuum/adaptdl ``simulator/traces``): step and sync (all-reduce) times of every
  placement of 1-64 T4 GPUs on g4dn.12xlarge nodes (50 Gbit/s); throughput = GPUs x local batch /
  step time; node order does not matter, repeats are reduced to medians; three per-GPU batch sizes
  per model on multi-GPU placements (see ``POLLUX_BATCHES``), every batch size on one GPU.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import re
import statistics
from collections import defaultdict

T2T_BATCH = 128
COLUMNS = [
    "model", "batch_size", "cluster", "ps", "sync", "throughput",
    "network_gbps", "flops_per_sample", "param_count", "precision", "tensor_count", "source",
]
POLLUX_COLUMNS = [*COLUMNS[:-1], "step_time_s", "sync_time_s", "cloud", "source"]
# Model FLOPs (TFProf, fwd+bwd per sample) and parameter counts from CM-DARE's feature tables.
CMDARE_NAMES = {
    "Res15": "res15", "Res32": "res32", "res15": "res15", "res32": "res32",
    "shake mid 32d": "shakemid32d", "shake small 32d": "shakesmall32d",
}


def _steady_rate(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    drop = max(1, len(values) // 10) if len(values) > 3 else 0
    return statistics.median(values[drop:])


def _read_tb(path: str) -> list[float]:
    with open(path, newline="") as fh:
        return [float(r["Value"]) for r in csv.DictReader(fh) if r.get("Value") not in (None, "")]


def _model_name(label: str) -> str:
    label = CMDARE_NAMES.get(label, label)
    return "t2t-" + label.replace(" ", "").lower()


def cmdare_tensor_counts(data: str) -> dict[str, int]:
    """``Number of Tensors`` (TensorFlow variables) per model, from the tables that have the column."""
    counts: dict[str, int] = {}
    for name in ("0latency_norm_computation.csv", "0latency_k80_new.csv", "0latency_k80_test.csv"):
        with open(os.path.join(data, "cmdare/processed_data/speed_data", name), newline="") as fh:
            for r in csv.DictReader(fh):
                if r.get("Number of Tensors") and r.get("Model (temp)"):
                    counts[_model_name(r["Model (temp)"])] = int(float(r["Number of Tensors"]))
    return counts


def cmdare_features(data: str) -> dict[str, tuple[float, int]]:
    feats: dict[str, tuple[float, int]] = {}
    # 0latency_resnet.csv and speed_data_supertable.csv state FLOPs divided by the batch size; skip them.
    for name in ("0latency_data.csv", "0latency_k80_new.csv", "0latency_p100_new2.csv", "0latency_norm_computation.csv"):
        f = os.path.join(data, "cmdare/processed_data/speed_data", name)
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh):
                if "Model (temp)" in r and r.get("Model FLOPs") and r.get("Number of Parameters"):
                    feats[_model_name(r["Model (temp)"])] = (float(r["Model FLOPs"]), int(float(r["Number of Parameters"])))
    return feats


def cmdare_rows(data: str) -> list[dict]:
    feats = cmdare_features(data)
    rows = []
    # Single worker (1 worker + 1 PS), 13 measurements per (GPU, model), latency 0.3 ms.
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    with open(os.path.join(data, "cmdare/processed_data/speed_data/0latency_norm_computation.csv"), newline="") as fh:
        for r in csv.DictReader(fh):
            if r["Latency (ms)"] and abs(float(r["Latency (ms)"]) - 0.3) < 1e-6:
                samples[(r["GPU (temp)"].upper(), _model_name(r["Model (temp)"]))].append(float(r["Speed (steps/sec)"]))
    for d in sorted(glob.glob(os.path.join(data, "cmdare/processed_data/speed_data_base/*"))):
        m = re.match(r"([a-z0-9]+?)(k80|p100|v100)$", os.path.basename(d))
        vals = []
        with open(os.path.join(d, "data.csv"), newline="") as fh:
            vals = [float(r["Value"]) for r in csv.DictReader(fh) if r["Value"]]
        key = (m.group(2).upper(), _model_name(m.group(1)))
        if key not in samples:  # V100 baselines; K80/P100 already measured in the feature tables
            samples[key] = [_steady_rate(vals)]
    for (gpu, model), vals in sorted(samples.items()):
        flops, params = feats[model]
        rows.append(dict(model=model, batch_size=T2T_BATCH, cluster=f"1x{gpu}", ps=1, sync="async",
                         throughput=round(statistics.mean(vals) * T2T_BATCH, 3), flops_per_sample=flops,
                         param_count=params, precision="fp32", source="cmdare/speed_data"))
    # Cluster size 1..8, 1 PS (k80, p100) or 2 PS (p100ps2).
    for f in sorted(glob.glob(os.path.join(data, "cmdare/processed_data/speed_and_cluster_size/*/*/*.csv"))):
        folder, run = f.split(os.sep)[-3:-1]
        m = re.match(r"(res15|res32|shakesmall|shakes?big)(?:k?80|p?100)(?:ps2)?worker(\d+)$", run)
        gpu = "K80" if folder == "k80" else "P100"
        ps = 2 if folder.endswith("ps2") else 1
        model = _model_name(m.group(1).replace("shakesbig", "shakebig"))
        flops, params = feats[model]
        rate = _steady_rate(_read_tb(f))
        rows.append(dict(model=model, batch_size=T2T_BATCH, cluster=f"{m.group(2)}x{gpu}", ps=ps, sync="async",
                         throughput=round(rate * T2T_BATCH, 3), flops_per_sample=flops, param_count=params,
                         precision="fp32", source=f"cmdare/speed_and_cluster_size/{folder}"))
    tensors = cmdare_tensor_counts(data)
    for r in rows:
        r["tensor_count"] = tensors.get(r["model"], "")
    return rows


def _run_rates(path: str, group_col: str | None) -> list[float]:
    """Steps/s of each run over its whole length.

    Evaluation timestamps are quantised by the checkpoint interval (about 60 s), so the rate of a
    single 4000-step interval jumps between two values; the slope over the whole run does not.
    """
    by_run: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            key = (r.get("Zone", ""), r.get("Run", "")) if group_col else ""
            by_run[str(key)].append((float(r["Wall Time"]), float(r["Step"])))
    rates = []
    for pts in by_run.values():
        pts.sort()
        (t0, s0), (t1, s1) = pts[0], pts[-1]
        if len(pts) >= 3 and t1 > t0 and s1 > s0:
            rates.append((s1 - s0) / (t1 - t0))
    return rates


def transient_rows(data: str) -> list[dict]:
    feats = cmdare_features(data)
    flops, params = feats["t2t-res32"]
    base = os.path.join(data, "transient-dl/training")
    configs = []  # (path, workers, gpu, ps)
    for d in sorted(glob.glob(os.path.join(base, "experiment_1ps_vs_2ps/*ps*[kv]"))):
        m = re.match(r"(\d)ps(\d)([kv])$", os.path.basename(d))
        configs.append((os.path.join(d, "train_data.csv"), int(m.group(2)), {"k": "K80", "v": "V100"}[m.group(3)], int(m.group(1))))
    for f in sorted(glob.glob(os.path.join(base, "experiment_1ps_vs_2ps/1ps_k80/*_data.csv"))):
        configs.append((f, int(os.path.basename(f).split("_")[0]), "K80", 1))
    for name, n in (("k80-demand", 1), ("2-demand", 2), ("4-demand", 4), ("8-demand", 8)):
        configs.append((os.path.join(base, "k80_on_demand", name, "train_data.csv"), n, "K80", 1))
    for name, n, gpu in (("p100", 1, "P100"), ("v100", 1, "V100")):
        configs.append((os.path.join(base, "p100_v100_spot", name, "train_data.csv"), n, gpu, 1))
    rows = []
    for path, n, gpu, ps in configs:
        rate = statistics.median(_run_rates(path, "Run"))
        rows.append(dict(model="t2t-res32", batch_size=T2T_BATCH, cluster=f"{n}x{gpu}", ps=ps, sync="async",
                         throughput=round(rate * T2T_BATCH, 3), flops_per_sample=flops, param_count=params,
                         precision="fp32", source="transient-dl/" + os.path.relpath(os.path.dirname(path), base),
                         tensor_count=cmdare_tensor_counts(data)["t2t-res32"]))
    return rows


def _known_figures(name: str) -> tuple[int, int, int]:
    """(fwd+bwd FLOPs per sample, parameters, parameter tensors) of a network spottrain knows by name."""
    from spottrain.perf.workload import published_architecture

    arch = published_architecture(name)
    return round(arch.flops_per_sample), arch.param_count, arch.tensor_count


# name_gpu label fragments -> GPU name used by spottrain.
LAMBDA_GPUS = [
    ("Quadro RTX 8000", "RTX8000"), ("V100", "V100"), ("RTX 3090", "RTX3090"), ("RTX 4090", "RTX4090"),
    ("A100 40GB PCIe", "A100-PCIe"), ("A100 80GB PCIe", "A100-80GB-PCIe"), ("A100 80GB SXM4", "A100-80GB"),
    ("RTX 6000 Ada", "RTX6000-Ada"), ("RTX A6000", "RTXA6000"), ("H100 80GB PCIe", "H100-PCIe"),
    ("H100 80GB SXM5", "H100"), ("GH200", "GH200"), ("B200", "B200"), ("A10", "A10"),
]
# (fwd+bwd FLOPs per sample, parameters, parameter tensors); see module docstring. A BERT encoder
# with its pooler and a question-answering head holds 5 + 16 L + 2 + 2 parameter tensors for L
# layers: word, position and type embeddings and their LayerNorm (2); per layer query, key, value,
# attention output, intermediate and output dense layers (weight and bias each) and two LayerNorms;
# the pooler and qa_outputs dense layers (NVIDIA's and Hugging Face's BertForQuestionAnswering).
LAMBDA_MODELS = {
    "resnet50": (3 * 2 * 4.1e9, 25_557_032, 161),
    "bert_base_squad": (3 * 384 * (2 * 85.0e6 + 4 * 12 * 384 * 768), 110_000_000, 5 + 16 * 12 + 4),
    "bert_large_squad": (3 * 384 * (2 * 302.0e6 + 4 * 24 * 384 * 1024), 340_000_000, 5 + 16 * 24 + 4),
    # SSD300 with a ResNet-50 backbone (NVIDIA DeepLearningExamples' detector, Lambda's column
    # ``ssd``): the figures spottrain knows it by, counted by tools/count_ssd300_flops.py.
    "ssd300_resnet50": _known_figures("ssd300_resnet50"),
}
# Lambda's column of a model where its name is not the model's.
LAMBDA_COLUMNS = {"ssd300_resnet50": "ssd"}


# Largest believable speed-up over n x the 1-GPU rate (run-to-run spread of repeated Lambda cells is
# a few per cent); cells above it are reported and left out.
SUPERLINEAR = 1.10
LAMBDA_EXCLUDED: list[str] = []


def _lambda_gpu(label: str) -> str | None:
    for frag, name in LAMBDA_GPUS:
        if frag in label:
            return name
    return None


def lambda_rows(data: str) -> list[dict]:
    base = os.path.join(data, "lambda-dl-benchmark/pytorch")
    cells: dict[tuple, list[float]] = defaultdict(list)
    for sub in ("", "csv_v1_v2/"):
        for prec in ("fp32", "fp16"):
            with open(os.path.join(base, f"{sub}pytorch-train-throughput-{prec}.csv"), newline="") as fh:
                thr = list(csv.DictReader(fh))
            with open(os.path.join(base, f"{sub}pytorch-train-bs-{prec}.csv"), newline="") as fh:
                bs = {r["name_gpu"]: r for r in csv.DictReader(fh)}
            for r in thr:
                gpu = _lambda_gpu(r["name_gpu"])
                if gpu is None or r["name_gpu"] not in bs:
                    continue
                n = int(float(r["num_gpu"]))
                for model in LAMBDA_MODELS:
                    column = LAMBDA_COLUMNS.get(model, model)
                    v, b = r.get(column), bs[r["name_gpu"]].get(column)
                    if v and b and float(v) > 0 and float(b) > 0:
                        # The -bs- tables give the global batch of the machine (it scales with num_gpu).
                        cells[(model, max(1, round(float(b) / n)), gpu, n, prec)].append(float(v))
    rows = []
    for (model, b, gpu, n, prec), vals in sorted(cells.items()):
        flops, params, tensors = LAMBDA_MODELS[model]
        one = cells.get((model, b, gpu, 1, prec))
        if n > 1 and one and statistics.median(vals) > SUPERLINEAR * n * statistics.median(one):
            # Data parallelism at a fixed per-GPU batch cannot beat n x the 1-GPU rate by more
            # than run-to-run noise: such a cell measured something else (see SOURCE.md).
            LAMBDA_EXCLUDED.append(f"{model} {prec} {n}x{gpu} (per-GPU batch {b}): {statistics.median(vals):g}/s = "
                                   f"{statistics.median(vals) / statistics.median(one):.2f} x the 1-GPU rate")
            continue
        rows.append(dict(model=model, batch_size=b, cluster=f"1x{gpu}:{n}" if n > 1 else f"1x{gpu}", ps=0,
                         sync="sync", throughput=round(statistics.median(vals), 3), flops_per_sample=round(flops),
                         param_count=params, precision=prec, tensor_count=tensors, source="lambda-dl-benchmark"))
    return rows


# Pollux (OSDI'21, petuum/adaptdl simulator traces): PyTorch all-reduce on AWS g4dn.12xlarge nodes
# (4 T4 per node, 50 Gbit/s). Model name, fwd+bwd FLOPs per sample and parameters of each folder:
# ResNet-18 (kuangliu's CIFAR variant, the zoo's resnet18-cifar), ResNet-50 at 224x224 (the zoo's
# resnet50, as Lambda's rows), BERT-base fine-tuned on SQuAD at 384 tokens (Lambda's
# bert_base_squad figures), and NeuMF ("NeuMF-end", adaptdl examples/NCF: factor_num 32, 3 MLP
# layers, MovieLens-1M 6,040 users x 3,706 items): embeddings (6040 + 3706) x (32 + 128), MLP
# 256-128-64-32 and the 64 -> 1 predict layer = 1,602,657 parameters in 12 tensors, 3 x 2 x 43,297
# multiply-adds of the dense layers per sample (embedding look-ups cost no FLOPs worth counting).
POLLUX_NETWORK_GBPS = 50.0
POLLUX_GPUS_PER_NODE = 4
POLLUX_MODELS = {
    "cifar10": ("resnet18-cifar", 3_328_997_000.0, 11_173_962, 62),
    "imagenet": ("resnet50", 3 * 2 * 4.1e9, 25_557_032, 161),
    "bert": ("bert_base_squad", 3 * 384 * (2 * 85.0e6 + 4 * 12 * 384 * 768), 110_000_000, 5 + 16 * 12 + 4),
    "ncf": ("ncf-neumf", 3 * 2 * 43_297.0, 1_602_657, 12),
}
# Arithmetic of each folder's training script (petuum/adaptdl benchmark/models/<folder>/, same
# commit): only ImageNet calls apex ``amp.initialize(model, optimizer)``, whose default opt_level
# O1 runs convolutions and GEMMs in fp16 and keeps fp32 weights (and gradients); CIFAR-10, BERT
# (run.sh passes no --fp16) and NCF train in fp32.
POLLUX_PRECISION = {"cifar10": "fp32", "imagenet": "fp16", "bert": "fp32", "ncf": "fp32"}
# Per-GPU batch sizes kept per model: the smallest, one near the geometric middle and the largest
# measured on every placement (the traces hold 5-21; all of them for single-GPU rows). The other
# sizes add rows, not information the model lacks, and would outweigh the other studies' 379 rows.
POLLUX_BATCHES = {"cifar10": (32, 182, 1024), "imagenet": (20, 57, 200), "bert": (4, 8, 12), "ncf": (32, 513, 4103)}


def _spread(nodes: int, replicas: int) -> list[int]:
    """GPUs per node when ``replicas`` GPUs spread as evenly as possible over ``nodes`` nodes."""
    base, extra = divmod(replicas, nodes)
    return [base + 1] * extra + [base] * (nodes - extra)


def _cluster_of(per_node: list[int]) -> str:
    """``'+'``-joined groups of nodes with equal GPU counts, most GPUs per node first: [1,1,1,3] -> 1xT4:3+3xT4:1."""
    counts: dict[int, int] = defaultdict(int)
    for g in per_node:
        counts[g] += 1
    return "+".join(f"{n}xT4:{g}" if g > 1 else f"{n}xT4" for g, n in sorted(counts.items(), reverse=True))


def pollux_rows(data: str) -> list[dict]:
    """Step and all-reduce (sync) times of every placement, one row per cluster shape and batch size.

    The order of the nodes does not matter (``1113`` and ``3111`` are one cluster): repeated
    placements are reduced to the median step and sync times. ``scalability.csv`` gives only the
    numbers of nodes and GPUs (6-16 nodes): its GPUs are taken as spread evenly over the nodes.
    """
    rows = []
    for folder, (model, flops, params, tensors) in POLLUX_MODELS.items():
        cells: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
        keep = POLLUX_BATCHES[folder]
        with open(os.path.join(data, "pollux", folder, "placements.csv"), newline="") as fh:
            for r in csv.DictReader(fh):
                per_node = sorted((int(c) for c in r["placement"]), reverse=True)
                b = int(r["local_bsz"])
                if b in keep or per_node == [1]:
                    cells[(tuple(per_node), b, "placements")].append((float(r["step_time"]), float(r["sync_time"])))
        with open(os.path.join(data, "pollux", folder, "scalability.csv"), newline="") as fh:
            for r in csv.DictReader(fh):
                b = int(r["local_bsz"])
                if b in keep:
                    per_node = _spread(int(r["num_nodes"]), int(r["num_replicas"]))
                    cells[(tuple(per_node), b, "scalability")].append((float(r["step_time"]), float(r["sync_time"])))
        for (per_node, b, part), vals in sorted(cells.items(), key=lambda kv: (len(kv[0][0]), kv[0])):
            step = statistics.median(v[0] for v in vals)
            sync = statistics.median(v[1] for v in vals)
            gpus = sum(per_node)
            rows.append(dict(model=model, batch_size=b, cluster=_cluster_of(list(per_node)), ps=0, sync="sync",
                             throughput=round(gpus * b / step, 3), network_gbps=POLLUX_NETWORK_GBPS,
                             flops_per_sample=round(flops), param_count=params, precision=POLLUX_PRECISION[folder],
                             tensor_count=tensors or "", step_time_s=round(step, 6), sync_time_s=round(sync, 6),
                             cloud="aws", source=f"pollux/{folder}/{part}"))
    return rows


def accuracy_curves(data: str) -> list[dict]:
    """Test-accuracy curves of ResNet-32 (transient-dl), asynchronous PS training.

    ``experiment`` k80_on_demand: 1/2/4/8 K80 workers, 1 PS, several runs each; 1ps_vs_2ps: 2-8 K80
    or V100 workers with 1 or 2 PS (the experiment the throughput table's PS rows come from).
    One row per evaluation point; ``workers`` is the cluster size, ``batch_size`` per worker.
    Spot runs are not used (revocations change the cluster during the run).
    """
    base = os.path.join(data, "transient-dl/training/k80_on_demand")
    rows = []
    for name, n in (("k80-demand", 1), ("2-demand", 2), ("4-demand", 4), ("8-demand", 8)):
        with open(os.path.join(base, name, "train_data.csv"), newline="") as fh:
            for r in csv.DictReader(fh):
                rows.append(dict(curve=f"k80-{n}w-run{r['Run']}", model="t2t-res32", gpu="K80", workers=n, ps=1,
                                 sync="async", batch_size=T2T_BATCH, step=int(float(r["Step"])),
                                 wall_time_s=float(r["Wall Time"]), accuracy=float(r["Accuracy"]),
                                 experiment="k80_on_demand"))
    # The PS-bottleneck experiment: the same job on 2-8 K80 or V100 workers with 1 or 2 servers.
    exp = os.path.join(data, "transient-dl/training/experiment_1ps_vs_2ps")
    sets = [(f"1ps_k80/{n}_data.csv", n, "K80", 1) for n in range(2, 9)]
    sets += [(f"{k}ps{n}{g[0].lower()}/train_data.csv", n, g, k) for k, g in ((1, "V100"), (2, "K80"), (2, "V100"))
             for n in range(2, 9)]
    for rel, n, gpu, k in sets:
        with open(os.path.join(exp, rel), newline="") as fh:
            for r in csv.DictReader(fh):
                rows.append(dict(curve=f"{gpu.lower()}-{k}ps-{n}w-run{r.get('Run') or 1}", model="t2t-res32", gpu=gpu,
                                 workers=n, ps=k, sync="async", batch_size=T2T_BATCH, step=int(float(r["Step"])),
                                 wall_time_s=float(r["Wall Time"]), accuracy=float(r["Accuracy"]),
                                 experiment="1ps_vs_2ps"))
    return rows


def write(rows: list[dict], path: str, columns: list[str] | None = None) -> None:
    with open(path, "w", newline="") as fh:
        columns = columns or COLUMNS
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns})
    print(f"wrote {len(rows)} rows to {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p.add_argument("--data", default=os.path.join(here, "..", "shared", "data"))
    p.add_argument("--out", default=os.path.join(here, "spottrain", "data", "measurements"))
    p.add_argument("--params-only", action="store_true", help="only refit the default model's saved parameters")
    a = p.parse_args()
    if a.params_only:
        write_default_model(a.out)
        return
    os.makedirs(a.out, exist_ok=True)
    write(cmdare_rows(a.data), os.path.join(a.out, "cmdare.csv"))
    write(transient_rows(a.data), os.path.join(a.out, "transient_dl.csv"))
    write(lambda_rows(a.data), os.path.join(a.out, "lambda.csv"))
    write(pollux_rows(a.data), os.path.join(a.out, "pollux.csv"), POLLUX_COLUMNS)
    for line in LAMBDA_EXCLUDED:
        print(f"excluded (super-linear, physically impossible): {line}")
    curves = accuracy_curves(a.data)
    os.makedirs(os.path.join(a.out, "curves"), exist_ok=True)
    write(curves, os.path.join(a.out, "curves", "transient_dl_accuracy.csv"), list(curves[0]))
    write_default_model(a.out)


def write_default_model(out: str) -> None:
    """Fit spottrain's default throughput model on the tables just written and save its state."""
    import json

    from spottrain.perf.throughput import DEFAULT_PARAMS_FILE, fit_default_model

    from spottrain.files import write_atomic

    path = os.path.join(out, DEFAULT_PARAMS_FILE)
    # Fitted first, then replaced whole: a fit that fails leaves the saved parameters as they were.
    state = fit_default_model().to_dict()
    write_atomic(path, json.dumps(state, indent=1, sort_keys=True) + "\n")
    print(f"wrote the default model's fitted parameters to {path}")


if __name__ == "__main__":
    main()
