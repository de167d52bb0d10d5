"""The analytical throughput model: compute time from FLOPs, communication from gradient bytes.

Per GPU of type g and a model m at per-GPU batch b (samples) and F FLOPs per sample::

    P_eff  = P_fp32 * (P_fast / P_fp32) ** lam          fast path: fp16 tensor cores (lam16) or TF32 (lam_tf32)
    log e  = c0 + w_bw * log(BW / P_eff / 0.05 B/FLOP) + w_size * (log(b F) - 26) + e_g + e_m
    t_comp = tau + b F / (P_eff * e)                     (e: achieved fraction; roofline via w_bw)

e_g and e_m are per-GPU and per-model deviations, plus a smaller per-(GPU, model) interaction,
fitted with a ridge prior (0 when unseen), so an unseen GPU is predicted from its peak FLOPS and
memory bandwidth and an unseen model from its FLOPs.

Communication of S gradient bytes (fp32: 4 x parameters):

* inside a node of G GPUs: ring all-reduce ``2 (G-1)/G S / B_link`` (NVLink per direction, else PCIe);
* ring all-reduce over N nodes: ``2 (N-1)/N S / B_nic`` with the slowest NIC, overlapped with the
  backward pass by a fraction phi: ``T = T_comp + T_comm - phi min(T_comm, 2/3 T_comp)``;
  sync = every step waits for the slowest node;
* parameter servers (spotDNN): each worker pushes and pulls S per step, ``t_comm = 2 S / B_wk``
  with ``B_wk = P B_ps/N + (1-P) B_req`` when the worker's link B_req exceeds its fair share
  ``B_ps/N``, else ``B_req``; ``P = min(alpha sqrt(N) + beta, 1)``; k servers give
  ``B_ps = B_ps1 * k ** kappa``. Async: the cluster's steps/s is the sum of the workers' rates,
  capped by the servers' capacity ``k ** kappa / (lat + 2 S / B_ps1)`` (a per-update cost plus
  the bytes); sync: the slowest worker sets the pace.

Everything is vectorised over rows (and groups within a row) for fitting; :func:`predict_one`
is the scalar fast path the planner calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GLOBALS = ("c0", "w_bw", "lam16", "lam_tf32", "log_tau", "log_bps", "kappa", "alpha", "beta",
           "log_net_eff", "log_link_eff", "phi", "w_size", "log_ps_lat")
# Prior mean and standard deviation of each global parameter (physics defaults).
PRIOR = {
    "c0": (math.log(0.35), 1.0), "w_bw": (0.3, 0.3), "lam16": (0.35, 0.3), "lam_tf32": (0.3, 0.3),
    "log_tau": (math.log(0.003), 1.5), "log_bps": (math.log(0.7), 1.0), "kappa": (0.85, 0.3),
    "alpha": (0.1, 0.3), "beta": (0.6, 0.3), "log_net_eff": (math.log(0.6), 0.5),
    "log_link_eff": (math.log(0.6), 0.5), "phi": (0.5, 0.3), "w_size": (0.0, 0.2),
    "log_ps_lat": (math.log(0.002), 1.0),
}
BW_REF = math.log(0.05 * 1000.0)  # 0.05 bytes/FLOP with BW in GB/s and P in TFLOPS
SIZE_REF = 26.0  # log(b F) of ResNet-32 at batch 128
G_INDEX = {name: i for i, name in enumerate(GLOBALS)}


@dataclass
class Encoded:
    """Rows as arrays: R rows, K groups per row (padded with cnt = 0)."""

    cnt: np.ndarray  # (R, K) nodes
    gpn: np.ndarray  # (R, K) GPUs per node
    dev: np.ndarray  # (R, K) device index into the device table
    net: np.ndarray  # (R, K) per-node network GB/s (before efficiency)
    b: np.ndarray  # (R,)
    flops: np.ndarray  # (R,)
    grad: np.ndarray  # (R,) bytes
    fp16: np.ndarray  # (R,) bool
    ps: np.ndarray  # (R,)
    asyn: np.ndarray  # (R,) bool
    gidx: np.ndarray  # (R, K) GPU-effect index (-1 = unseen)
    midx: np.ndarray  # (R,) model-effect index (-1 = unseen)
    iidx: np.ndarray  # (R, K) GPU x model interaction index (-1 = unseen)


@dataclass
class DeviceTable:
    """Per-device log peak figures, as arrays indexed by device index."""

    names: list[str]
    log_p32: np.ndarray
    log_p16: np.ndarray
    log_ptf: np.ndarray
    log_bw: np.ndarray
    link_gbs: np.ndarray


def _clip01(x):
    return np.minimum(np.maximum(x, 0.0), 1.0)


def evaluate(theta: np.ndarray, e_g: np.ndarray, e_m: np.ndarray, enc: Encoded, devs: DeviceTable,
             detail: bool = False, e_i: np.ndarray | None = None):
    """Predicted cluster throughput (samples/s) of every encoded row (and the parts, if ``detail``)."""
    g = {n: theta[i] for i, n in enumerate(GLOBALS)}
    d = enc.dev
    lp32 = devs.log_p32[d]
    lfast = np.where(enc.fp16[:, None], devs.log_p16[d], devs.log_ptf[d])
    lam = np.where(enc.fp16[:, None], g["lam16"], g["lam_tf32"])
    lpeff = lp32 + lam * (lfast - lp32)
    work = enc.b * enc.flops  # FLOPs per GPU per step
    ge = np.where(enc.gidx >= 0, e_g[np.maximum(enc.gidx, 0)] if e_g.size else 0.0, 0.0)
    me = np.where(enc.midx >= 0, e_m[np.maximum(enc.midx, 0)] if e_m.size else 0.0, 0.0)
    ie = (np.where(enc.iidx >= 0, e_i[np.maximum(enc.iidx, 0)], 0.0)
          if e_i is not None and e_i.size else 0.0)
    logeff = ie + (g["c0"] + g["w_bw"] * (devs.log_bw[d] - lpeff - BW_REF) + g["w_size"] * (np.log(work) - SIZE_REF)[:, None]
              + ge + me[:, None])
    t_comp = math.exp(g["log_tau"]) + work[:, None] / np.exp(lpeff + logeff + math.log(1e12))
    present = enc.cnt > 0
    S = enc.grad[:, None]
    link = devs.link_gbs[d] * 1e9 * math.exp(g["log_link_eff"])
    G = enc.gpn
    t_intra = np.where(G > 1, 2.0 * (G - 1) / np.maximum(G, 1) * S / link, 0.0)
    net = enc.net * 1e9 * math.exp(g["log_net_eff"])
    N = enc.cnt.sum(axis=1).astype(float)
    gpus = (enc.cnt * G).sum(axis=1)
    big = 1e30
    phi = float(np.clip(g["phi"], 0.0, 1.0))
    # All-reduce rows.
    tc_max = np.where(present, t_comp, 0.0).max(axis=1)
    net_min = np.where(present, net, big).min(axis=1)
    t_inter = np.where(N > 1, 2.0 * (N - 1) / np.maximum(N, 1) * enc.grad / net_min, 0.0)
    t_intra_max = np.where(present, t_intra, 0.0).max(axis=1)
    t_ar = t_intra_max + t_inter
    T_ar = tc_max + t_ar - phi * np.minimum(t_ar, (2.0 / 3.0) * tc_max)
    x_ar = gpus * enc.b / T_ar
    # Parameter-server rows.
    k = np.maximum(enc.ps, 1).astype(float)
    bps = math.exp(g["log_bps"]) * 1e9 * k ** g["kappa"]
    fair = (bps / np.maximum(N, 1))[:, None]
    P = _clip01(g["alpha"] * np.sqrt(N) + g["beta"])[:, None]
    b_wk = np.where(net > fair, P * fair + (1 - P) * net, net)
    t_ps = 2.0 * S / b_wk + t_intra
    T_w = t_comp + t_ps
    steps = np.where(present, enc.cnt / T_w, 0.0).sum(axis=1)
    cap = k ** g["kappa"] / (math.exp(g["log_ps_lat"]) + 2.0 * enc.grad / (math.exp(g["log_bps"]) * 1e9))
    scale = np.minimum(1.0, cap / steps)
    x_async = np.where(present, enc.cnt * G / T_w, 0.0).sum(axis=1) * enc.b * scale
    T_sync = np.where(present, T_w, 0.0).max(axis=1)
    x_psync = gpus * enc.b / T_sync
    x = np.where(enc.ps == 0, x_ar, np.where(enc.asyn, x_async, x_psync))
    if not detail:
        return x
    parts = dict(t_comp=tc_max, t_comm_ar=t_ar, t_inter=t_inter, t_intra=t_intra_max, ps_cap_bound=scale < 1.0,
                 ps_shared=(net > fair).any(axis=1), t_ps=np.where(present, t_ps, 0.0).max(axis=1),
                 t_ps_net=np.where(present, 2.0 * S / b_wk, 0.0).max(axis=1),
                 t_w=np.where(present, T_w, 0.0).max(axis=1))
    return x, parts


def bottleneck(row_ps: int, parts: dict, i: int) -> str:
    """Name the resource that limits row ``i``: compute, network, ps or pcie."""
    tc = parts["t_comp"][i]
    if row_ps == 0:
        times = {"compute": tc, "network": parts["t_inter"][i], "pcie": parts["t_intra"][i]}
        return max(times, key=times.get)
    if parts["ps_cap_bound"][i]:
        return "ps"
    t_net = parts["t_ps_net"][i]
    t_intra = parts["t_ps"][i] - t_net
    if max(t_net, t_intra) <= tc:
        return "compute"
    if t_intra > t_net:
        return "pcie"
    return "ps" if parts["ps_shared"][i] else "network"
