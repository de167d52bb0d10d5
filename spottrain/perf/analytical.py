"""The analytical throughput model: roofline compute time, link-bound communication, PS queueing.

**Compute** of one GPU of type g on a model at per-GPU batch b (F FLOPs per sample, P
parameters in n_t tensors), a two-term roofline::

    1/P_eff = f / P_fast + (1 - f) / P_fp32                  Amdahl: a fraction f of the FLOPs (GEMMs, convolutions)
                                                             runs on the fast path -- fp16 tensor cores (f16) or TF32
                                                             (f_tf32) -- the rest on the FP32 CUDA cores
    e      = logistic(c0 + w_size * (log(b F) - 26))         achieved fraction of peak; bigger steps keep the GPU busier
    AI     = ai0 * (P_a / n_t / 2e4) ** w_ai  (x2 at fp16)   FLOPs per byte of activation traffic: grows with layer width;
                                                             P_a = min(P, F / 6) the parameters that do arithmetic;
                                                             bytes per FLOP 1/AI + (exp(-below) - 1) / AI_fp32: the
                                                             traffic of F / A below dense networks' (intensity_below)
    s      = min(1, d / d0) ** beta  (GDDR boards only)       power limit: d = board W per dense fp16 TFLOPS (throttle)
    t_work = b F || 1 / (P_eff e s), 1 / (AI BW) ||_2 * exp(-(level + e_g + e_m + e_gm))
    t_comp = tau + || tau_t * n_t, t_work ||_p,  p = 1 + exp(ov)   per-step + per-tensor (dispatch) overhead
    t_step = smoothmax(t_comp, b t_in pix / pix_224)              host input pipeline runs beside the GPU

The second line: tau is the step's synchronous host work (the optimiser's bookkeeping, a loss read
back, a framework's per-step hooks), which the GPU waits for; tau_t n_t is the dispatch of every
layer's kernels. CUDA launches are asynchronous, so the host queues the next kernels while the GPU
runs the last ones: dispatch hides under the GPU's work and shows only when that work is short
(small batches on a fast GPU). p ~ 4 is close to their max (p = 1 would add them). Adding the two,
a fit on the older studies predicted 46 ms a step for ResNet-50 at batch 32 on an H200, where
PyTorch 2.11 takes 18 ms.

The last line is the data loader: decoding and augmenting ImageNet-sized images costs CPU time
per sample (t_in per 224x224x3 image per GPU); it overlaps GPU work, so the step takes the longer
of the two. It is what caps ResNet-50 at ~3,000 images/s per GPU on H100/GH200/B200 whatever the
precision. Models whose inputs are not images (tokens) or are tiny (CIFAR) have no such term.

The memory term makes narrow-layer models (low arithmetic intensity) gain less from a GPU with
more FLOPS than memory bandwidth. Layer width is read off the parameters that take part in
multiply-adds: a weight does 2 FLOPs forward and 4 backward per sample and position, so a model of
F FLOPs per sample has at most F / 6 of them. The rest are lookup tables (embeddings), which a
sample reads a few rows of: they widen no layer. NCF holds 97 % of its 1.6 M parameters in
embeddings (F / P = 0.16); counted as width they made it look as compute-bound as a CIFAR ResNet's
widest layers, and its T4 throughput at batch 32k was predicted at 2x the measured (Pollux held out).
Every other shipped model has F / P >= 140: the bound leaves them as they were.

Width stands for intensity because a dense layer's FLOPs per element it writes grow with its input
channels. Where the elements the forward pass writes per sample (A) are known (the zoo, a profile,
a table's column), a network that writes more per FLOP than the dense networks' scatter about the
width's line gets the excess one for one (:func:`intensity_below`): depthwise convolutions do
18-50 FLOPs per element they write whatever their width, and MobileNetV2's speed on an H100 was
predicted at 2-3.4x the measured from its width alone.

Compute time and memory-traffic time combine as a 2-norm, ``sqrt(c^2 + m^2)``: between their sum
(no overlap: a roofline per kernel where every kernel is either a GEMM or an elementwise pass) and
their max (one roofline for the whole step, the two fully overlapped). Within a step, GEMMs stream operands while elementwise kernels compute, so the truth
lies between; held out by GPU type (Lambda table) the sum scores 11.3 %, exponents 1.5 / 2 / 2.5 / 4
score 10.7 / 10.5 / 10.5 / 11.1 %, and the 2-norm is kept as the round middle of that flat range
(the CIFAR leave-one-model-out figure prefers the sum: 8.1 % against 8.3 %).

e_g, e_m and e_gm are per-GPU, per-model and per-(GPU, model) speed deviations fitted with a
ridge prior (0 when unseen): an unseen GPU is predicted from its peak FLOPS and memory bandwidth,
an unseen model from its FLOPs, size and layer width. On fp16 rows e_m also holds the model's
mixed-precision effect (a tighter prior, ``precision_sigma``): what the framework's fp16 path of
that model gains beyond the roofline's fp16 peak and halved traffic. PyTorch autocast, as in
NVIDIA's ResNet-50 scripts, keeps fp32 weights, batch norm and the casts in fp32, so ResNet-50
gains less from fp16 than a model held entirely in fp16 (their BERT). Being the model's, it
carries over to GPUs the table does not hold.

**Communication** of S gradient bytes (fp32: 4 x parameters). A mixed-precision (fp16) step
all-reduces between 2 and 4 bytes per parameter: 2 when the model itself is held in fp16 (apex O2,
as NVIDIA's BERT scripts do; their 2-8 GPU runs lose half as much time to communication in fp16 as
in fp32), 4 when fp32 parameters are kept and only the arithmetic is fp16 (PyTorch autocast, as
their ResNet-50 does). The all-reduce payload is ``S (1/2 + 1/2 logistic(g16))`` at fp16, with the
fitted global g16 saying where between the two the measured frameworks sit.

* inside a node of G GPUs: ring all-reduce ``2 (G-1)/G S / (B_link exp(link_eff + e_l))`` (NVLink
  per direction, else PCIe). e_l is a per-GPU-type interconnect effect fitted with a ridge prior
  (``link_sigma``; 0 for a GPU type without multi-GPU rows): what a node of that GPU achieves
  against its datasheet link is a property of the host (P2P enabled or not, PCIe switch topology,
  NVLink exposed to a partial VM or not) that the GPU's spec does not carry. In the Lambda table
  the 8-GPU V100 and A100 SXM machines scale like PCIe hosts (BERT-large fp32 on 8 A100: 3.3x),
  while the H100 and B200 SXM machines reach their NVLink. The path never falls below a
  host-staged copy (every byte crossing the GPU's PCIe link twice: PCIe / 2 at a bulk copy's line
  efficiency, shared by the node's GPUs beyond two, x 2/G: ``host_staged_gbs``), which bounds what
  a badly connected measured node can teach about other nodes of that GPU. Being the host's, e_l
  applies to the model fitted on that host's rows only: the shipped calibration and models that
  take a fitted model as prior start every GPU type at 0 (``throughput.fit_default_model``);
* ring all-reduce over N nodes of G GPUs (NCCL): n = N G ranks, each rank sends ``2 (n-1)/n S``;
  the rings are pipelined, so the slowest link sets the pace::

      t_inter = 2 (n-1)/n S / B_eff + n_b 2 (n-1) alpha                    (N > 1)
      1/B_eff = 1/(0.9 B_node) + 1/C                                      (TCP networks)
      t_comm  = max(t_intra, t_inter)

  with B_node the slowest node's nominal NIC rate and C (``ar_cap``) the rate a collective over
  TCP sockets achieves per node whatever the NIC: cloud networks without RDMA reach a small part
  of what is sold. No per-flow cap sets C: NCCL spreads each connection over several sockets
  where it recognises the cloud's NIC (16 on AWS's ENA, 2 helper threads x 8; 4 threads on GCP's
  gVNIC; 1 elsewhere), so AWS's 5 Gbit/s per flow outside a cluster placement group does not
  bind. The helper threads copying through host memory do, and their rate depends on the host
  and the NCCL version, which no datasheet states (Pollux's g4dn.12xlarge all-reduce fits C ~ 8
  Gbit/s, a sixth of its 50). The harmonic sum is a smooth
  minimum: a 10 Gbit/s node is held near its line rate, a 50 Gbit/s one near C. Nodes of
  RDMA_GBPS and more (p4d/p5 with EFA, InfiniBand hosts) do not go through TCP: B_eff = r B_node
  there, r (``rdma_eff``) the fraction of the line rate NCCL's ring reaches over RDMA (prior 0.55,
  at most 0.9: published nccl-tests runs on p4dn and p5 reach 0.3-0.6; no shipped row measures
  one, so their interval carries that prior's width, and a user's rows fit it). Between exactly two
  TCP nodes B_eff is multiplied by exp(``two_node``): Pollux's two-node placements sync about twice
  as slowly as three or four nodes of the same GPUs (BERT on 8 T4s: 1.66 s against 0.72-0.80 s),
  where a ring moves the same bytes per node (NCCL's maintainers call two nodes a special case,
  NVIDIA/nccl#946). The ring's N links between TCP nodes do not all run at C: their rates differ
  from pair to pair (log sd ``link_spread``), and a pipelined ring runs at its slowest link's
  pace, so t_inter is multiplied by exp(spread z_N), z_N = E[max of N standard normals]
  (:func:`slowest_link`: 0.56 for 2 nodes, 1.03 for 4, 1.77 for 16). On Pollux's rows 3-4 nodes
  were predicted 6-8 % too slow and 16 nodes 5 % too fast with every link alike. The prior
  assumes every link alike (spread 0), so without rows across nodes nothing changes. RDMA fabrics
  are left out (no row measures one). The main fit holds the two-node rate at 1 and the spread at
  0; then both are fitted with C and alpha, every other parameter held where the main fit left
  them (``throughput._fit_network``), so they move all-reduce rows across TCP nodes only: fitted
  with the rest, one cloud's two-node rows moved the compute parameters (Lambda held out 13.8 ->
  16.7 %).
  n_b = ceil(S / 25 MB) gradient buckets (PyTorch DDP's default bucket size), each a ring of
  2 (n-1) steps of which 2 (N-1) cross the network and pay its latency alpha (``ar_lat``, fitted
  over TCP; RDMA_LAT_S = 20 us over RDMA, NCCL's own figure); the steps inside a node (NVLink,
  PCIe, shared memory: microseconds) are left out, as NCCL's own cost model does (intra- and
  inter-node latencies per ring step). Pollux's NCF (one 6 MB bucket) syncs in 20-24 ms over 8
  nodes whether they hold 8 or 32 GPUs. Communication overlaps the backward pass (DDP launches a
  bucket's all-reduce as soon as its gradients are ready) by a fraction phi, but the last bucket
  can only start when backward ends::

      exposed = max(t_comm - phi min(t_comm, 2/3 T_comp), t_comm / n_b)
      T       = T_comp + exposed

  phi is one node's (``phi_intra``) or several nodes' (``phi``): inside a node NCCL's kernels move
  and reduce the bytes over NVLink or PCIe at the link's rate and take SMs from the backward pass
  while they run; across nodes the same kernels mostly wait on the network (CPU proxy threads
  drive the sockets), and the backward pass keeps its SMs. Lambda's one-node rows fit phi_intra
  ~0.4, Pollux's multi-node ones phi 0.75; one phi for both let Lambda's rows set no overlap at
  all across nodes wherever Pollux's were not fitted (Pollux held out: 19.1 % with one, 17.4 %
  with two).

  ``exposed`` is what PyTorch DDP / AdaptDL time as the step's sync time; measured sync times
  (``sync_time_s``) are fitted directly. Every step waits for the slowest node.
* parameter servers: every update visits the servers, which spend ``D`` seconds on it::

      D = ps_f  +  ps_t * n_t * s_t  +  2 S * s_b / B_ps

  (a fixed cost per update that every server pays -- each worker step runs its partition of the
  graph on every server: one RunGraph call and the step's set-up, ~1.5 ms fitted, so more servers
  do not divide it -- plus a per-tensor RPC / apply cost and push and pull of the bytes, on the
  busiest of the k servers: s_t and s_b are the largest shares of the tensors and of the bytes
  that one server holds, both 1 for one server and >= 1 / k). The servers work on an update in
  parallel, so the busiest one sets the pace. TensorFlow 1 places
  variables round-robin in creation order, so the split depends on the order of the model's
  variables: where it is known (:mod:`spottrain.perf.placement`: Tensor2Tensor's CIFAR ResNets
  split about evenly, Shake-Shake puts 99.7 % of its bytes on one of two servers), the shares are
  computed; otherwise ``s_t = 1 / k`` and ``s_b = k ** -kappa``, kappa in [0, 1] (prior 0.7: an
  uneven split; k servers divide the work by k at best). A worker node cycles between
  ``Z_i = t_comp_i + t_intra_i + 2 S / B_nic_i`` (its own compute and transfer, the transfer overlapping
  the compute by a fraction phi_ps) and the servers.
  *Asynchronous* training is a closed queueing network of N workers and one queueing station of
  demand D; mean-value analysis gives the update rate X(N) (1 / (Z + D) for one worker,
  approaching the servers' capacity 1 / D as N grows, the queueing that spotDNN's contention
  probability P = min(alpha sqrt(N) + beta, 1) approximates). A server applies every update
  with the same work, so its service time is nearly constant: an update that finds the server
  busy waits for the remaining part of the update in service, a fraction ``q`` of D (1/2 for
  constant service times, 1 for exponential ones), not a whole D as exact MVA assumes (Reiser's
  approximation ``R = D (1 + Q - (1 - q) U)``, U the utilisation, X held at 1 / D at most).
  ``q`` is fitted in [0.05, 1] with the prior 1/2; smaller q keeps throughput near N / (Z + D)
  until close to the capacity, the sharper saturation knee measured on CM-DARE's clusters
  (8 K80 workers still scale 7.98x while ResNet-32's one server caps P100 / V100 clusters at
  ~5,700 samples/s). Heterogeneous workers
  share X in proportion to 1 / (Z_i + R) with R the servers' response time; samples/s =
  ``b * sum_i X_i G_i``. *Synchronous* PS: every step waits for the slowest worker and for the
  servers to serve all N updates, ``T = max_i Z_i + N D``.

Everything is vectorised over rows (and groups within a row) for fitting; :func:`predict_one`
is the scalar fast path the planner calls.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

GLOBALS = ("log_level", "c0", "log_ai", "lam16", "lam_tf32", "log_tau", "w_size", "w_ai", "log_tau_t",
           "log_ps_t", "log_bps", "kappa", "log_net_eff", "log_link_eff", "phi", "phi_ps", "log_t_in",
           "ps_q", "log_ps_f",
           # Intra-node all-reduce:
           "g16",
           # Inter-node all-reduce: achieved fraction of the nominal NIC rate, per-step ring latency.
           "log_ar_cap", "log_ar_lat",
           # Overlap of the host's per-step dispatch with the GPU's work.
           "log_ov",
           # Power-limited clocks of GDDR boards: the power density below which they throttle, how steeply.
           "log_pw_d0", "pw_beta",
           # Overlap of one node's all-reduce with the backward pass (phi is several nodes').
           "phi_intra",
           # Achieved fraction of the line rate of an all-reduce across RDMA nodes (EFA, InfiniBand).
           "log_rdma_eff",
           # Rate of a TCP all-reduce between exactly two nodes against three or more (fitted last).
           "log_two_node",
           # Spread (log sd) of the rates of the TCP links between nodes: a ring runs at its slowest.
           "link_spread")
# Prior mean and standard deviation of each global parameter (physics defaults).
PRIOR = {
    # c0 = logit of the fraction of peak of large GEMM-like steps (~0.7); arithmetic intensity of
    # CIFAR ResNets (32-128 channels) ~14 FLOPs per byte of activation traffic, ~ sqrt(width).
    # lam16 / lam_tf32: logit of the fraction of FLOPs on the FP16 / TF32 tensor-core path (~0.9).
    # lam16 is held near 0.95 (sd 0.5: 0.88-0.98): convolutions and GEMMs are nearly all the FLOPs
    # of a mixed-precision step, and the slowness of the few fp16 rows of one GPU (the T4's) belongs
    # to that GPU, not to every GPU's tensor path (Lambda held out: 27.0 % with the wide prior of
    # lam_tf32, 21.0 % with this one).
    # log_level: overall speed of a framework / workload family relative to the roofline; free.
    "log_level": (0.0, 3.0), "c0": (0.8, 1.0), "log_ai": (math.log(14.0), 1.0), "lam16": (3.0, 0.5), "lam_tf32": (2.2, 1.5),
    "log_tau": (math.log(0.003), 1.5), "w_size": (0.0, 0.3), "w_ai": (0.5, 0.3),
    "log_tau_t": (math.log(1e-4), 1.5),
    # A TF1 gRPC parameter server: ~0.1 ms per variable per update, ~1 GB/s for push + pull;
    # kappa: how the bytes split over k servers when the variable layout is unknown (k ** -kappa).
    "log_ps_t": (math.log(1e-4), 1.0), "log_bps": (math.log(1.0), 1.0), "kappa": (0.7, 0.4),
    "log_net_eff": (math.log(0.6), 0.5), "log_link_eff": (math.log(0.6), 0.5),
    "phi": (0.5, 0.3), "phi_ps": (0.5, 0.3),
    # Host input pipeline (JPEG decode + augmentation) per 224x224x3 image per GPU: a few hundred
    # microseconds of CPU work spread over the node's cores; the data sets free it (weak prior).
    "log_t_in": (math.log(3e-4), 1.0),
    # Residual service an update arriving at a busy server waits for, as a fraction of the
    # server's time per update: 1 for exponential service, 1/2 for deterministic service (a TF
    # server applies every update with the same work). Held in [Q_MIN, 1].
    "ps_q": (0.5, 0.25),
    # Fixed server time per update (per-step RunGraph call and executor set-up on each server).
    "log_ps_f": (math.log(1e-3), 1.0),
    # Gradient bytes a mixed-precision (fp16) step all-reduces: 4 per parameter when the framework
    # keeps fp32 parameters (PyTorch autocast), 2 when the model itself is fp16 (apex O2, Megatron);
    # g16 is the logit of where between the two. The prior leans to 4 bytes (logistic(2) = 0.88):
    # autocast is PyTorch's mixed precision since 1.6 and apex's default O1 keeps fp32 weights too
    # (Pollux's ResNet-50); only Lambda's BERT rows (apex O2) say 2, and a global halfway prior let
    # them halve every fp16 model's all-reduce (Pollux ResNet-50 across nodes, one node measured:
    # sync predicted at a quarter of the measured; with this prior multi-node rows err 15.9 %).
    # sd 0.5 (the payload between 0.88 and 0.97 of fp32's at 90 %): DDP all-reduces the gradients
    # of the parameters, fp32 under autocast, unless a compression hook is registered. At sd 1 the
    # fit without ResNet-50's multi-node rows set the payload to 0.76 of fp32's from one node's rows
    # and Lambda's fp16 ones, and predicted ResNet-50's sync across nodes 18-66 % short (Pollux
    # multi-node with one node measured: 15.1 %, 13.6 % at sd 0.5).
    "g16": (2.0, 0.5),
    # Rate (Gbit/s per node) an inter-node all-reduce over TCP sockets achieves, whatever the NIC
    # sold. One TCP flow is capped at 5 Gbit/s on AWS outside a cluster placement group, 10 inside
    # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html),
    # but NCCL's socket transport opens 16 sockets per connection on AWS (2 threads x 8, chosen by
    # the NIC's PCI vendor; 4 on GCP), so the cap is its host-side copying rather than the flow
    # limit: a prior at the flow limit, wide (x2 at one sd) for the hosts and NCCL versions between.
    "log_ar_cap": (math.log(5.0), 0.7),
    # Latency of one ring step of one gradient bucket between nodes (TCP sockets: 0.05-1 ms).
    "log_ar_lat": (math.log(2e-4), 1.5),
    # The per-tensor dispatch (kernel launches of every layer, the optimiser's per-tensor work) and
    # the GPU's work combine as a p-norm, p = 1 + exp(log_ov): CUDA launches are asynchronous, the
    # host queues the next kernels while the GPU runs the last ones, so dispatch hides under long
    # kernels and shows only when they are short (p large: the max; p = 1 would add them). Prior
    # p ~ 4 (2.8-6 at one sd): the older studies cannot tell p (their steps are GPU-bound or their
    # overheads synchronous); held out one study at a time, priors p ~ 3, 4, 6 give the same errors
    # within 3 points, a weak prior around 2 lets the TF1-era rows pull it to a sum (Lambda 21 %,
    # our own H100/H200 rows 38 %, against 16 % and 22 %).
    "log_ov": (math.log(3.0), 0.5),
    # A GDDR board of power density d (W per dense fp16 tensor TFLOPS) below d0 sustains
    # (d / d0) ** beta of its compute peak. Dynamic power grows as f V^2 and the voltage with the clock
    # at the top of the curve (P ~ f^3: beta = 1/3), linearly once the voltage is at its floor
    # (beta = 1): prior beta 0.5 +- 0.2. d0 between the boards known to hold their boost clock under
    # dense load (GeForce RTX 3090 / 4090: 4.9 / 2.7) and those known not to (T4 1.1, L4 0.6): 2.5,
    # x1.5 at one sd. Fitted: d0 ~ 3.7, beta ~ 0.65 (the T4 at 0.44 of its peak, an RTX 6000 Ada at 0.51).
    "log_pw_d0": (math.log(2.5), 0.4),
    "pw_beta": (0.5, 0.2),
    # The same prior as phi's: nothing says beforehand how far SM contention cuts the overlap.
    "phi_intra": (0.5, 0.3),
    # Fraction of the line rate an NCCL all-reduce across RDMA nodes achieves (ring bus bandwidth
    # over the node's NIC rate). No shipped row measures one; published nccl-tests runs on clouds
    # reach 0.3-0.6 (4 p4dn.24xlarge, 400 Gbit/s EFA: 29.6 GB/s of 50 at 1 GB, NVIDIA/nccl#527;
    # p5.48xlarge, 3,200 Gbit/s: 92-125 GB/s of 400, aws/aws-k8s-tester#503; p3dn, 100 Gbit/s EFA:
    # 60 Gbit/s with the ring, NVIDIA/nccl-tests#22) and tuned InfiniBand pods ~0.9. Prior 0.55,
    # x/1.65 at one sd; held below LINE_EFF.
    "log_rdma_eff": (math.log(0.55), 0.5),
    # A TCP all-reduce between exactly two nodes against three or more: no direction assumed
    # (x/1.65 at one sd). Held at this mean by the main fit, then fitted with the TCP rate, the
    # ring-step latency and the links' spread (see the docstring).
    "log_two_node": (0.0, 0.5),
    # Log sd of the rate one TCP link between two cloud nodes reaches, from pair to pair: a ring of N
    # nodes crosses N links and runs at the slowest one's pace, exp(spread z_N) slower than a typical
    # link (z_N = E[max of N standard normals]: 0.56 for 2 nodes, 1.03 for 4, 1.77 for 16). A few
    # tenths: instance pairs of one cloud region differ by tens of per cent in sustained TCP rate.
    # The prior assumes every link alike (0), so a fit without rows across nodes predicts as before
    # the spread existed; held there by the main fit, fitted with the TCP rate and the two-node rate
    # after it (at least 0).
    "link_spread": (0.0, 0.3),
}
# Values of later globals at which a model saved before them predicts as it did (padding in from_dict).
NEUTRAL = {"log_two_node": 0.0, "link_spread": 0.0}
_NORMAL = NormalDist()
BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's default gradient bucket (bucket_cap_mb = 25)
LINE_EFF = 0.9  # fraction of the line rate a bulk transfer reaches when nothing else limits it
RDMA_GBPS = 200.0  # nodes with this much network or more (EFA, InfiniBand) run collectives over RDMA, not TCP
# Latency of one ring step between RDMA nodes: NCCL's own tuning model charges 9.6 us per network
# step of a ring (simple protocol, src/graph/tuning.cc hwLat) and x1.9 on multi-node rings (the
# "plateau effect"). ar_lat is fitted over TCP sockets (~0.4 ms), twenty times that.
RDMA_LAT_S = 2e-5


def slowest_link(n):
    """E[max of n standard normals] (Blom's approximation, within 0.03 of the exact value): how many
    standard deviations below the typical link the slowest of a ring's n links runs; 0 for one node."""
    if np.ndim(n) == 0:
        return _slowest_link_one(max(float(n), 1.0))
    u, inv = np.unique(np.maximum(np.asarray(n, float), 1.0), return_inverse=True)
    z = np.array([_slowest_link_one(k) for k in u])
    return z[inv].reshape(np.shape(n))


@functools.lru_cache(maxsize=1024)
def _slowest_link_one(k: float) -> float:
    """:func:`slowest_link` of one ring size (the planner asks for the same few sizes thousands of times)."""
    return _NORMAL.inv_cdf((k - 0.375) / (k + 0.25)) if k > 1.0 else 0.0


def _exposed_slope(unhidden, t_ar, t_comp, n_b, phi):
    """d exposed / d t_ar of the exposed all-reduce time max(unhidden, t_ar/n_b), where
    unhidden = t_ar - phi min(t_ar, 2/3 t_comp)."""
    overlapped = unhidden >= t_ar / n_b
    return np.where(overlapped, np.where(t_ar < (2.0 / 3.0) * t_comp, 1.0 - phi, 1.0), 1.0 / n_b)


def achieved_gbps(nominal_gbps, log_cap: float, log_rdma: float = PRIOR["log_rdma_eff"][0]):
    """Per-node rate (Gbit/s) an inter-node all-reduce achieves on a NIC sold at ``nominal_gbps``."""
    nominal = np.asarray(nominal_gbps, float)
    line = LINE_EFF * nominal
    tcp = 1.0 / (1.0 / line + 1.0 / math.exp(log_cap))
    return np.where(nominal >= RDMA_GBPS, nominal * min(math.exp(log_rdma), LINE_EFF), tcp)
PIX_REF = 3 * 224 * 224  # input elements of one ImageNet training image
SOFTMAX_P = 6.0  # sharpness of the smooth max of GPU time and input-pipeline time
ROOF_P = 2.0  # the compute and memory-traffic times of a step combine as a 2-norm (see the module docstring)
SIZE_REF = 26.0  # log(b F) of ResNet-32 at batch 128
WIDTH_REF = math.log(2e4)  # parameters per tensor of the CIFAR ResNets
FLOPS_PER_PARAM = 6.0  # a weight in a multiply-add: 2 FLOPs forward, 4 backward, per sample and position
INTENSITY_REF = 6.2  # log FLOPs per activation element of a dense network of the CIFAR ResNets' width
INTENSITY_PER_WIDTH = 0.24  # slope of log(F / A) on log width over the zoo's dense networks
INTENSITY_SCATTER = 0.46  # sd of the zoo's dense networks' log(F / A) about the width's line
INTENSITY_SD = 0.3  # log sd per unit of log intensity below that scatter (the roofline's slope, uncertain)


def log_width(grad, flops, ntens):
    """log of the parameters per tensor that do arithmetic, relative to the CIFAR ResNets'."""
    params = np.minimum(np.asarray(grad, float) / 4.0, np.asarray(flops, float) / FLOPS_PER_PARAM)
    return np.log(params / ntens) - WIDTH_REF


def log_intensity(flops, acts, width):
    """log of FLOPs per activation element (F / A, ``acts`` the elements the forward pass writes per
    sample) over what a dense network of layer width ``width`` (:func:`log_width`) has.

    The width stands for intensity in the fit: a dense layer's FLOPs per element it writes grow with
    its input channels. Over the zoo's dense networks log(F / A) follows the width at a slope of
    0.24 with a scatter of 0.46 (GPT-2's vocabulary-sized logits 0.8 below the line, VGG 0.5-0.7
    above). A 3x3 depthwise convolution does 18 FLOPs per element it writes whatever its width:
    MobileNetV2 sits 2.0 below the line, 7x less intensity than its width says."""
    return np.log(np.asarray(flops, float) / acts) - INTENSITY_REF - INTENSITY_PER_WIDTH * np.asarray(width, float)


def intensity_below(dev):
    """How far (log, <= 0) an intensity deviation (:func:`log_intensity`) lies below the dense
    networks' scatter about the width's line (INTENSITY_SCATTER, one sd): the part of a network's
    activation traffic its width cannot see, which the memory term takes one for one (a roofline's
    intensity is FLOPs per byte moved).

    One-sided: above the line a network leans to the compute term, and the fit has seen such networks
    (VGG, the CIFAR ResNet-18: 0.5-0.7 above) without their being faster than their width says. Below
    it lie depthwise and grouped convolutions (MobileNetV2 2.0, EfficientNet-B0 1.6 below) and
    vocabulary-sized logits (GPT-2, 0.8). Only networks a fit has no rows of take it: a fitted
    network's own speed carries its traffic (the calibration is the same with it or without).

    The excess adds bytes per FLOP at the fp32 rate whatever the precision: depthwise kernels are held
    on the SM side, not by memory bandwidth (an H200, 1.43x an H100's bandwidth, runs MobileNetV2
    1.04-1.08x as fast) and fp16 does not halve them (MobileNetV2 and EfficientNet-B0 gain 1.3x
    from it on an H100, where halving all their traffic predicted 1.7x)."""
    return np.minimum(np.asarray(dev, float) + INTENSITY_SCATTER, 0.0)


Q_MIN = 0.05  # smallest residual-service fraction of the PS queue (0 would drop the capacity bound)
MVA_MAX = 512  # exact mean-value analysis up to this many workers, the saturated asymptote beyond
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
    ntens: np.ndarray  # (R,) parameter tensors
    fp16: np.ndarray  # (R,) bool
    ps: np.ndarray  # (R,)
    asyn: np.ndarray  # (R,) bool
    gidx: np.ndarray  # (R, K) GPU-effect index (-1 = unseen)
    midx: np.ndarray  # (R,) model-effect index (-1 = unseen)
    pix: np.ndarray  # (R,) decoded image elements per sample (0 = no host image pipeline)
    iidx: np.ndarray  # (R, K) GPU x model interaction index (-1 = unseen)
    ps_bshare: np.ndarray  # (R,) largest share of the bytes on one server (NaN = layout unknown)
    ps_tshare: np.ndarray  # (R,) largest share of the tensors on one server (NaN = layout unknown)
    lidx: np.ndarray  # (R, K) node-interconnect effect index (-1 = unseen)
    pidx: np.ndarray  # (R,) index into e_m of the model's mixed-precision effect (-1 = none)
    below: np.ndarray  # (R,) log intensity below the dense networks' scatter, see intensity_below (<= 0)


@dataclass
class DeviceTable:
    """Per-device log peak figures, as arrays indexed by device index."""

    names: list[str]
    log_p32: np.ndarray
    log_p16: np.ndarray
    log_ptf: np.ndarray
    log_bw: np.ndarray
    link_gbs: np.ndarray
    pcie_gbs: np.ndarray  # host link per direction: the floor of the intra-node path
    log_pd: np.ndarray  # log power density of a power-limited board (NaN: not power-limited), see throttle


def mva(Z: np.ndarray, D: np.ndarray, N: np.ndarray, q: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Mean-value analysis of N customers, think time Z, one FCFS queue of demand D (vectorised).

    ``q`` is the mean residual service an arriving update finds left of the one in service, as a
    fraction of D: 1 = exponential service (exact MVA), 1/2 = deterministic service seen at
    random instants (Reiser's approximation ``R = D (1 + Q - (1 - q) U)``, U the utilisation;
    for q < 1 it overshoots the capacity near saturation, so X is held at 1 / D at most).
    Returns (throughput X in cycles/s, response time R of the queue).
    """
    Z, D, N = np.broadcast_arrays(np.asarray(Z, float), np.asarray(D, float), np.asarray(N, float))
    X = 1.0 / (Z + D)
    R = D.copy()
    Q = X * R
    U = X * D
    top = int(min(max(N.max(initial=1.0), 1.0), MVA_MAX))
    for n in range(2, top + 1):
        act = N >= n
        Rn = D * (1.0 + Q - (1.0 - q) * U)
        Xn = np.minimum(n / (Z + Rn), 1.0 / D)  # the approximation overshoots the capacity for q < 1
        Rn = n / Xn - Z
        R = np.where(act, Rn, R)
        X = np.where(act, Xn, X)
        Q = np.where(act, Xn * Rn, Q)
        U = np.where(act, Xn * D, U)
    big = N > MVA_MAX
    if big.any():  # far into saturation: the servers' capacity, or the workers' if they are slower
        X = np.where(big, np.minimum(N / (Z + D), 1.0 / D), X)
        R = np.where(big, N / X - Z, R)
    return X, R


def mva_scalar(Z: float, D: float, N: int, q: float = 1.0) -> tuple[float, float]:
    """:func:`mva` for one configuration (pure Python: the planner's fast path)."""
    if N > MVA_MAX:
        X = min(N / (Z + D), 1.0 / D)
        return X, N / X - Z
    X, R = 1.0 / (Z + D), D
    Q, U = X * R, X * D
    s = 1.0 - q
    for n in range(2, int(N) + 1):
        R = D * (1.0 + Q - s * U)
        X = n / (Z + R)
        if X * D > 1.0:  # the approximation overshoots the capacity for q < 1
            X = 1.0 / D
            R = n * D - Z
        Q = X * R
        U = X * D
    return X, R


def host_staged_gbs(pcie_gbs, gpus_per_node):
    """Per-GPU rate (GB/s) of an all-reduce staged through host memory: every byte crosses the GPU's
    PCIe link twice (PCIe / 2 at a bulk copy's line efficiency), and beyond two GPUs their copies
    share the host's root complexes and memory (x 2 / G): Lambda's 8x A100 host ran BERT-large 1.1x
    faster on 8 GPUs than on 4."""
    G = np.maximum(np.asarray(gpus_per_node, float), 1.0)
    return LINE_EFF * 0.5 * np.asarray(pcie_gbs, float) * np.minimum(1.0, 2.0 / G)


def overlap_p(theta) -> float:
    """Exponent of the p-norm that combines the fixed per-step time with the GPU's work."""
    return 1.0 + math.exp(min(float(theta[G_INDEX["log_ov"]]), 5.0))


def fixed_times(theta, ntens: float, study_over: float = 0.0) -> tuple[float, float]:
    """(synchronous per-step time, per-tensor dispatch time) of a model of ``ntens`` tensors."""
    g = math.exp(study_over)
    return (math.exp(float(theta[G_INDEX["log_tau"]])) * g,
            math.exp(float(theta[G_INDEX["log_tau_t"]])) * ntens * g)


def dispatch_step(t_step0, t_dispatch, t_work, p: float):
    """The GPU's step: synchronous host time, then the p-norm of the dispatch and the GPU's work
    (floats or arrays); :func:`work_time` inverts it."""
    return t_step0 + (t_dispatch ** p + t_work ** p) ** (1.0 / p)


def fixed_part(t_step0, t_dispatch, t_work, p: float):
    """How much of :func:`dispatch_step` scales with the fixed times: d t / d log(fixed times).

    The sensitivity of a step to a study's per-step overhead, which an unknown study's is uncertain by.
    """
    tot = (t_dispatch ** p + t_work ** p) ** (1.0 / p)
    return t_step0 + t_dispatch * (t_dispatch / tot) ** (p - 1.0)


GPU_LIMITS = ("compute", "memory", "host", "input")
"""What sets a step whose GPU side (not its communication) is the bottleneck: the GPU's arithmetic,
its memory bandwidth (the activation-traffic term above the FLOP term), the host's per-step work and
kernel dispatch (more than half of the GPU's step), or the host's input pipeline (longer than the
GPU's step)."""


def gpu_limit(t_gpu, t_host, t_fixed, c_flop, m_flop):
    """Index into :data:`GPU_LIMITS` (floats or arrays); ``t_fixed``: :func:`fixed_part` of ``t_gpu``."""
    if isinstance(t_gpu, float):  # the planner's scalar path: no array round trip
        return 3 if t_host > t_gpu else 2 if t_fixed > 0.5 * t_gpu else 1 if m_flop > c_flop else 0
    return np.where(t_host > t_gpu, 3, np.where(t_fixed > 0.5 * t_gpu, 2, np.where(m_flop > c_flop, 1, 0)))


def work_time(t_step: float, theta, ntens: float) -> float:
    """The GPU-work part of a step of ``t_step`` seconds (the inverse of the step's composition)."""
    t0, t_disp = fixed_times(theta, ntens)
    p = overlap_p(theta)
    return max(max(t_step - t0, 0.0) ** p - t_disp ** p, 0.0) ** (1.0 / p)


def power_limit(theta) -> tuple[float, float]:
    """(log d0, beta) of :func:`throttle`, beta held in [0, 1.5]."""
    return float(theta[G_INDEX["log_pw_d0"]]), min(max(float(theta[G_INDEX["pw_beta"]]), 0.0), 1.5)


def throttle(theta, log_pd):
    """Log of the fraction of its compute peak a power-limited board sustains (<= 0; 0 where
    ``log_pd`` is NaN): ``beta * min(0, log(d / d0))``, d its power density. It scales the compute
    term only: a step bound by memory traffic draws less power and keeps more of its speed."""
    log_d0, beta = power_limit(theta)
    return beta * np.minimum(np.nan_to_num(np.asarray(log_pd, float) - log_d0, nan=0.0), 0.0)


def ar16_fraction(g16: float) -> float:
    """All-reduce bytes of a mixed-precision row relative to fp32 gradients: in [1/2, 1]."""
    return 0.5 + 0.5 / (1.0 + math.exp(-min(max(float(g16), -30.0), 30.0)))


def evaluate(theta: np.ndarray, e_g: np.ndarray, e_m: np.ndarray, enc: Encoded, devs: DeviceTable,
             detail: bool = False, e_i: np.ndarray | None = None, e_l: np.ndarray | None = None,
             study_level: np.ndarray | float = 0.0, study_over: np.ndarray | float = 0.0,
             log_comp: np.ndarray | None = None):
    """Predicted cluster throughput (samples/s) of every encoded row (and the parts, if ``detail``).

    ``study_level`` / ``study_over``: per-row log effects of the study a row comes from on the
    compute speed and on the fixed per-step overhead (framework, host and software era; 0 = an
    unknown study, the middle of those fitted).
    """
    g = {n: theta[i] for i, n in enumerate(GLOBALS)}
    d = enc.dev
    lp32 = devs.log_p32[d]
    lfast = np.where(enc.fp16[:, None], devs.log_p16[d], devs.log_ptf[d])
    f = 1.0 / (1.0 + np.exp(-np.where(enc.fp16[:, None], g["lam16"], g["lam_tf32"])))
    inv_peak = f * np.exp(-lfast) + (1.0 - f) * np.exp(-lp32)
    work = enc.b * enc.flops  # FLOPs per GPU per step
    ge = np.where(enc.gidx >= 0, e_g[np.maximum(enc.gidx, 0)] if e_g.size else 0.0, 0.0)
    me = np.where(enc.midx >= 0, e_m[np.maximum(enc.midx, 0)] if e_m.size else 0.0, 0.0)
    if e_m.size:
        me = me + np.where(enc.pidx >= 0, e_m[np.maximum(enc.pidx, 0)], 0.0)
    ie = (np.where(enc.iidx >= 0, e_i[np.maximum(enc.iidx, 0)], 0.0)
          if e_i is not None and e_i.size else 0.0)
    width = log_width(enc.grad, enc.flops, enc.ntens)
    x = np.clip(g["c0"] + g["w_size"] * (np.log(work) - SIZE_REF), -30.0, 30.0)
    eff = (1.0 / (1.0 + np.exp(-x)))[:, None]
    # Bytes per FLOP: the width's traffic (halved at fp16) plus the excess below the dense networks' (not halved).
    inv_ai = np.exp(-(g["log_ai"] + g["w_ai"] * width)) * (np.where(enc.fp16, 0.5, 1.0) + np.expm1(-enc.below))
    log_ai = -np.log(inv_ai)
    c_flop = inv_peak / (1e12 * eff) * np.exp(-throttle(theta, devs.log_pd[d]))
    m_flop = 1.0 / (np.exp(log_ai)[:, None] * np.exp(devs.log_bw[d]) * 1e9)
    per_flop = (c_flop ** ROOF_P + m_flop ** ROOF_P) ** (1.0 / ROOF_P)
    t_step0 = math.exp(g["log_tau"]) * np.exp(study_over)  # synchronous per-step host work
    t_fixed = math.exp(g["log_tau_t"]) * enc.ntens * np.exp(study_over)  # per-tensor dispatch (overlaps)
    lvl = g["log_level"] + np.asarray(study_level, float)
    t_work = work[:, None] * per_flop * np.exp(-(np.reshape(lvl, (-1, 1)) + ie + ge + me[:, None]))
    p_ov = overlap_p(theta)
    t_gpu = dispatch_step(np.reshape(t_step0, (-1, 1)), t_fixed[:, None], t_work, p_ov)
    t_host = (enc.b * math.exp(g["log_t_in"]) * enc.pix / PIX_REF)[:, None]
    t_comp = (t_gpu ** SOFTMAX_P + t_host ** SOFTMAX_P) ** (1.0 / SOFTMAX_P)
    if log_comp is not None:  # (rows, groups): the compute step measured on one GPU (ThroughputModel._step_anchor)
        t_comp = t_comp * np.exp(log_comp)
    present = enc.cnt > 0
    S = enc.grad[:, None]
    # All-reduce payload: mixed-precision rows send between 2 (fp16 gradients) and 4 bytes per parameter.
    S_ar = enc.grad * np.where(enc.fp16, ar16_fraction(g["g16"]), 1.0)
    le = (np.where(enc.lidx >= 0, e_l[np.maximum(enc.lidx, 0)], 0.0)
          if e_l is not None and e_l.size else 0.0)
    # However poorly a node uses its GPUs' link, the all-reduce can always be staged through host
    # memory (NCCL's SHM path), whatever the fitted efficiency of the links: see host_staged_gbs.
    link = np.maximum(devs.link_gbs[d] * np.exp(le) * math.exp(g["log_link_eff"]),
                      host_staged_gbs(devs.pcie_gbs[d], enc.gpn)) * 1e9
    G = enc.gpn
    t_intra = np.where(G > 1, 2.0 * (G - 1) / np.maximum(G, 1) * S_ar[:, None] / link, 0.0)
    net = enc.net * 1e9 * math.exp(g["log_net_eff"])
    N = enc.cnt.sum(axis=1).astype(float)
    gpus = (enc.cnt * G).sum(axis=1)
    big = 1e30
    phi = np.where(N > 1, float(np.clip(g["phi"], 0.0, 1.0)), float(np.clip(g["phi_intra"], 0.0, 1.0)))
    # All-reduce rows: the slowest node's NIC at the achieved fraction, plus a latency per bucket and ring step between nodes.
    tc_max = np.where(present, t_comp, 0.0).max(axis=1)
    nominal = np.where(present, enc.net, big).min(axis=1) * 8.0  # the slowest node's NIC, Gbit/s
    rdma = nominal >= RDMA_GBPS
    rate_gbps = achieved_gbps(nominal, g["log_ar_cap"], g["log_rdma_eff"])
    two = np.where((N == 2) & ~rdma, math.exp(g["log_two_node"]), 1.0)
    net_min = rate_gbps * two / 8.0 * 1e9
    n_b = np.maximum(np.ceil(S_ar / BUCKET_BYTES), 1.0)
    lat = np.where(rdma, RDMA_LAT_S, math.exp(g["log_ar_lat"]))
    # The ring's slowest TCP link sets its pace (link_spread); RDMA fabrics are not spread this way.
    slow = np.where(rdma, 1.0, np.exp(max(g["link_spread"], 0.0) * slowest_link(N)))
    t_inter = np.where(N > 1, (2.0 * (gpus - 1) / np.maximum(gpus, 1) * S_ar / net_min + n_b * 2.0 * (N - 1) * lat) * slow,
                       0.0)
    t_intra_max = np.where(present, t_intra, 0.0).max(axis=1)
    t_ar = np.maximum(t_intra_max, t_inter)
    unhidden = t_ar - phi * np.minimum(t_ar, (2.0 / 3.0) * tc_max)
    t_exposed = np.maximum(unhidden, t_ar / n_b)
    T_ar = tc_max + t_exposed
    x_ar = gpus * enc.b / T_ar
    # Parameter-server rows.
    k = np.maximum(enc.ps, 1).astype(float)
    # k servers divide the bytes at best by k: the split exponent stays in [0, 1].
    kb = min(max(g["kappa"], 0.0), 1.0)
    bshare = np.where(np.isnan(enc.ps_bshare), k ** -kb, enc.ps_bshare)
    tshare = np.where(np.isnan(enc.ps_tshare), 1.0 / k, enc.ps_tshare)
    D = (math.exp(g["log_ps_f"]) + math.exp(g["log_ps_t"]) * enc.ntens * tshare
         + 2.0 * enc.grad * bshare / (math.exp(g["log_bps"]) * 1e9))
    t_nic = 2.0 * S / net
    # A worker's own transfer and the servers' work on its update are the same bytes moving: the
    # worker waits for the slower of the two; the PS queue (below) accounts for D, Z only for the
    # excess of the worker's link. The worker's own pulls and pushes overlap its forward / backward
    # pass by phi_ps; the servers' time does not: it is the response time R the queue adds to every
    # cycle (crediting overlap against D as well counted it twice and made one busy PS look fast).
    t_move = np.maximum(t_nic, D[:, None])
    phi_ps = float(np.clip(g["phi_ps"], 0.0, 1.0))
    Z = t_comp + t_intra + (t_move - D[:, None]) - phi_ps * np.minimum(t_nic, t_comp)
    inv = np.where(present, enc.cnt / (Z + D[:, None]), 0.0).sum(axis=1)
    Z_eff = N / inv - D
    X, R = mva(Z_eff, D, N, min(max(g["ps_q"], Q_MIN), 1.0))
    share = np.where(present, enc.cnt / (Z + R[:, None]), 0.0)
    X_i = X[:, None] * share / share.sum(axis=1, keepdims=True)
    x_async = (X_i * G).sum(axis=1) * enc.b
    Z_max = np.where(present, Z, 0.0).max(axis=1)
    T_sync = Z_max + N * D
    x_psync = gpus * enc.b / T_sync
    x = np.where(enc.ps == 0, x_ar, np.where(enc.asyn, x_async, x_psync))
    if not detail:
        return x
    ps_busy = np.where(enc.asyn, X * D, N * D / T_sync)  # fraction of time the servers are busy
    t_w = np.where(enc.ps == 0, T_ar, np.where(enc.asyn, Z_max + R, T_sync))  # one step (update cycle)
    # the overhead's part of the step, through the smooth max with the input pipeline (d t_comp / d t_gpu)
    t_fixed_gpu = fixed_part(np.reshape(t_step0, (-1, 1)), t_fixed[:, None], t_work, p_ov)
    t_over = t_fixed_gpu * (t_gpu / t_comp) ** (SOFTMAX_P - 1.0)
    over = np.where(present, t_over, 0.0).max(axis=1) / t_w
    kinds = gpu_limit(t_gpu, t_host, t_fixed_gpu, c_flop, m_flop)
    slowest = np.where(present, t_comp, -np.inf).argmax(axis=1)
    # d log T / d log(TCP cap): the rate is the harmonic sum of the line rate and the cap, so
    # d log(rate) / d log(cap) = rate / cap and the bandwidth term k S / rate moves by k S / cap.
    # Over RDMA the rate is proportional to its fraction (below LINE_EFF): the whole bandwidth term moves.
    moves = np.where(rdma, (math.exp(g["log_rdma_eff"]) < LINE_EFF) / np.maximum(rate_gbps, 1e-30),
                     slow / (math.exp(g["log_ar_cap"]) * two))
    cap_share = np.where((enc.ps == 0) & (N > 1) & (t_inter >= t_intra_max),
                         _exposed_slope(unhidden, t_ar, tc_max, n_b, phi)
                         * 2.0 * (gpus - 1) / np.maximum(gpus, 1) * S_ar * 8e-9 * moves / T_ar,
                         0.0)
    parts = dict(t_comp=tc_max, t_comm_ar=t_ar, t_sync=t_exposed, t_inter=t_inter, t_intra=t_intra_max, ps_util=ps_busy,
                 t_ps=np.where(enc.asyn, R, N * D), t_nic=np.where(present, t_nic, 0.0).max(axis=1),
                 t_w=t_w, over_share=np.minimum(over, 1.0), cap_share=cap_share,
                 gpu_limit=kinds[np.arange(len(slowest)), slowest])
    return x, parts


def bottleneck(row_ps: int, parts: dict, i: int) -> str:
    """Name the resource that limits row ``i``: network, pcie, ps, or one of :data:`GPU_LIMITS`."""
    keys = ("t_comp", "t_inter", "t_intra", "gpu_limit") if row_ps == 0 else \
        ("t_comp", "t_nic", "t_intra", "t_ps", "ps_util", "gpu_limit")
    return bottleneck_of(row_ps, {k: parts[k][i] for k in keys})


@dataclass(frozen=True)
class GroupInput:
    """One cluster group for :func:`predict_one`: nodes of one GPU type."""

    count: int
    gpn: int
    log_p: float  # log sustained peak TFLOPS of the path used (TF32 / fp16 tensor path; = log_p32 without one)
    log_p32: float
    log_bw: float
    link_gbs: float
    net_gbs: float  # per-node network GB/s before efficiency
    effect: float  # e_g + e_gm
    link_effect: float = 0.0  # e_l: fitted log efficiency of this GPU type's intra-node interconnect
    pcie_gbs: float = 0.0  # host link per direction (sets the floor of the intra-node path: host_staged_gbs)
    log_comp: float = 0.0  # log factor on the compute step: the one-GPU step measured at this batch (ThroughputModel._step_anchor)
    log_pd: float = math.nan  # log power density of a power-limited board (NaN: not power-limited), see throttle


def predict_one(theta, groups: list[GroupInput], *, b: float, flops: float, grad: float, ntens: float, fp16: bool,
                ps: int, asyn: bool, model_effect: float, pix: float = 0.0,
                ps_share: tuple[float, float] | None = None, study_level: float = 0.0,
                study_over: float = 0.0, below: float = 0.0) -> tuple[float, dict, list[float]]:
    """Scalar :func:`evaluate` for one configuration: (samples/s, parts, samples/s per group).

    Same formulas as :func:`evaluate` (tests check they agree), in plain Python for speed.
    ``ps_share``: the largest (bytes, tensors) shares on one server when the variable layout is known.
    """
    g = dict(zip(GLOBALS, np.asarray(theta, float).tolist()))
    work = b * flops
    x = min(max(g["c0"] + g["w_size"] * (math.log(work) - SIZE_REF), -30.0), 30.0)
    eff = 1.0 / (1.0 + math.exp(-x))
    f = 1.0 / (1.0 + math.exp(-(g["lam16"] if fp16 else g["lam_tf32"])))
    width = math.log(min(grad / 4.0, flops / FLOPS_PER_PARAM) / ntens) - WIDTH_REF  # as log_width
    ai = math.exp(g["log_ai"] + g["w_ai"] * width) / ((0.5 if fp16 else 1.0) + math.expm1(-below))  # as evaluate
    t_step0, t_fixed = fixed_times(theta, ntens, study_over)
    link_eff, net_eff = math.exp(g["log_link_eff"]), math.exp(g["log_net_eff"])
    t_host = b * math.exp(g["log_t_in"]) * pix / PIX_REF
    p_ov = overlap_p(theta)
    pw_d0, pw_beta = power_limit(theta)
    tc, ti, tn, to, lim = [], [], [], [], []
    grad_ar = grad * ar16_fraction(g["g16"]) if fp16 else grad
    for gr in groups:
        inv_peak = f * math.exp(-gr.log_p) + (1.0 - f) * math.exp(-gr.log_p32)
        c_flop = inv_peak / (1e12 * eff)
        if gr.log_pd == gr.log_pd and gr.log_pd < pw_d0:  # a power-limited board below its threshold
            c_flop *= math.exp(-pw_beta * (gr.log_pd - pw_d0))
        m_flop = 1.0 / (ai * math.exp(gr.log_bw) * 1e9)
        per_flop = (c_flop ** ROOF_P + m_flop ** ROOF_P) ** (1.0 / ROOF_P)
        t_work = work * per_flop * math.exp(-(g["log_level"] + study_level + gr.effect + model_effect))
        t_gpu = dispatch_step(t_step0, t_fixed, t_work, p_ov)
        tc.append(((t_gpu ** SOFTMAX_P + t_host ** SOFTMAX_P) ** (1.0 / SOFTMAX_P) if t_host > 0 else t_gpu)
                  * math.exp(gr.log_comp))
        fixed = fixed_part(t_step0, t_fixed, t_work, p_ov)
        to.append(fixed * (t_gpu / tc[-1]) ** (SOFTMAX_P - 1.0))
        lim.append(int(gpu_limit(t_gpu, t_host, fixed, c_flop, m_flop)))
        G = gr.gpn
        if G > 1:
            link = max(gr.link_gbs * math.exp(gr.link_effect) * link_eff, float(host_staged_gbs(gr.pcie_gbs, G)))
            ti.append(2.0 * (G - 1) / G * grad_ar / (link * 1e9))
        else:
            ti.append(0.0)
        tn.append(2.0 * grad / (gr.net_gbs * 1e9 * net_eff))
    N = sum(gr.count for gr in groups)
    gpus = sum(gr.count * gr.gpn for gr in groups)
    tc_max, ti_max = max(tc), max(ti)
    limit = lim[tc.index(tc_max)]
    if ps == 0:
        nominal = min(gr.net_gbs for gr in groups) * 8.0
        line = LINE_EFF * nominal
        rdma = nominal >= RDMA_GBPS
        rdma_eff = min(math.exp(g["log_rdma_eff"]), LINE_EFF)
        net_gbps = nominal * rdma_eff if rdma else 1.0 / (1.0 / line + math.exp(-g["log_ar_cap"]))
        two = math.exp(g["log_two_node"]) if N == 2 and not rdma else 1.0
        net_min = net_gbps * two / 8.0 * 1e9
        n_b = max(math.ceil(grad_ar / BUCKET_BYTES), 1)
        lat = RDMA_LAT_S if rdma else math.exp(g["log_ar_lat"])
        slow = 1.0 if rdma else math.exp(max(g["link_spread"], 0.0) * float(slowest_link(N)))
        t_inter = (2.0 * (gpus - 1) / gpus * grad_ar / net_min + n_b * 2.0 * (N - 1) * lat) * slow if N > 1 else 0.0
        t_ar = max(ti_max, t_inter)
        phi = min(max(g["phi"] if N > 1 else g["phi_intra"], 0.0), 1.0)
        unhidden = t_ar - phi * min(t_ar, (2.0 / 3.0) * tc_max)
        t_sync = max(unhidden, t_ar / n_b)
        T = tc_max + t_sync
        x_total = gpus * b / T
        per = [x_total * gr.count * gr.gpn / gpus for gr in groups]
        cap_share = 0.0  # d log T / d log(TCP cap or RDMA fraction): the same as evaluate's, in plain Python
        if N > 1 and t_inter >= ti_max:
            overlapped = unhidden >= t_ar / n_b
            slope = (1.0 - phi if t_ar < (2.0 / 3.0) * tc_max else 1.0) if overlapped else 1.0 / n_b
            moves = (float(math.exp(g["log_rdma_eff"]) < LINE_EFF) / net_gbps if rdma
                     else slow / (math.exp(g["log_ar_cap"]) * two))
            cap_share = slope * 2.0 * (gpus - 1) / gpus * grad_ar * 8e-9 * moves / T
        return x_total, dict(t_comp=tc_max, t_inter=t_inter, t_intra=ti_max, t_sync=t_sync, t_w=T,
                             over_share=min(max(to) / T, 1.0), cap_share=cap_share, gpu_limit=limit), per
    k = float(max(ps, 1))
    kb = min(max(g["kappa"], 0.0), 1.0)
    bshare, tshare = ps_share if ps_share is not None else (k ** -kb, 1.0 / k)
    D = (math.exp(g["log_ps_f"]) + math.exp(g["log_ps_t"]) * ntens * tshare
         + 2.0 * grad * bshare / (math.exp(g["log_bps"]) * 1e9))
    phi_ps = min(max(g["phi_ps"], 0.0), 1.0)
    Z = []
    for c, i, n in zip(tc, ti, tn):
        move = max(n, D)
        Z.append(c + i + (move - D) - phi_ps * min(n, c))
    Z_max = max(Z)
    if asyn:
        inv = sum(gr.count / (z + D) for gr, z in zip(groups, Z))
        X, R = mva_scalar(N / inv - D, D, N, min(max(g["ps_q"], Q_MIN), 1.0))
        shares = [gr.count / (z + R) for gr, z in zip(groups, Z)]
        tot = sum(shares)
        per = [X * s / tot * gr.gpn * b for gr, s in zip(groups, shares)]
        x_total = sum(per)
        parts = dict(t_comp=tc_max, t_nic=max(tn), t_intra=ti_max, t_ps=R, ps_util=X * D, t_w=Z_max + R,
                     over_share=min(max(to) / (Z_max + R), 1.0), gpu_limit=limit)
        return x_total, parts, per
    T = Z_max + N * D
    x_total = gpus * b / T
    per = [x_total * gr.count * gr.gpn / gpus for gr in groups]
    return x_total, dict(t_comp=tc_max, t_nic=max(tn), t_intra=ti_max, t_ps=N * D, ps_util=N * D / T, t_w=T,
                         over_share=min(max(to) / T, 1.0), gpu_limit=limit), per


def bottleneck_of(ps: int, parts: dict) -> str:
    """:func:`bottleneck` for the parts of one configuration (:func:`predict_one`'s)."""
    if ps == 0:
        times = {"compute": parts["t_comp"], "network": parts["t_inter"], "pcie": parts["t_intra"]}
    elif parts["ps_util"] > 0.8:
        return "ps"
    else:
        times = {"compute": parts["t_comp"], "network": parts["t_nic"], "pcie": parts["t_intra"], "ps": parts["t_ps"]}
    name = max(times, key=times.get)
    return GPU_LIMITS[int(parts["gpu_limit"])] if name == "compute" else name
