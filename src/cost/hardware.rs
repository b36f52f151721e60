//! Accelerators and clusters of them, by name: `h100x8x2048` is 2,048 nodes of eight H100s,
//! `tpu-v5p-128` a v5p slice of 128 TensorCores (64 chips). Every figure is a datasheet's or
//! a cited measurement's (docs/cost.md lists the sources again, with the calibration).
//!
//! **Datasheets.**
//! - A100 SXM (NVIDIA A100 datasheet): dense BF16/FP16 312 TFLOP/s, FP32 19.5; 80 GB HBM2e at
//!   2.039 TB/s, or 40 GB HBM2 at 1.555 TB/s; NVLink 3, 600 GB/s per GPU in both directions
//!   (300 each way). DGX A100: eight 200 Gb/s HDR InfiniBand ports for eight GPUs, 25 GB/s
//!   each way per GPU.
//! - H100 SXM (H100 datasheet): dense BF16 989.4 TFLOP/s, FP32 66.9; 80 GB HBM3 at 3.35 TB/s;
//!   NVLink 4, 900 GB/s per GPU (450 each way). DGX H100: eight 400 Gb/s NDR ports, 50 GB/s
//!   each way per GPU (InfiniBand or RoCE: the Llama 3 cluster's RoCE is also 400 Gb/s per
//!   GPU).
//! - H200 SXM (H200 datasheet): the H100's compute, 141 GB HBM3e at 4.8 TB/s, the same NVLink
//!   and network.
//! - TPU v5e (Cloud TPU docs): 197 TFLOP/s BF16, 16 GiB HBM at 819 GB/s, a 2-D torus (the
//!   256-chip pod is 16 × 16), 1 chip per TensorCore.
//! - TPU v5p (Cloud TPU docs): 459 TFLOP/s BF16, 95 GB HBM2e at 2.765 TB/s, a 3-D torus, two
//!   TensorCores per chip (Cloud's `v5p-128` is 64 chips). ICI per link each way: 45 GB/s on
//!   v5e and 90 GB/s on v5p (the scaling book, *How to Scale Your Model*, TPU chapter).
//!
//! **The network** is two tiers. Inside a node every GPU reaches every other over NVLink
//! through NVSwitch. Across nodes the fabric is a rail-optimised fat tree (DGX SuperPOD
//! reference architecture): GPU i of every node sits on rail i, and the tree is
//! non-blocking, so a GPU's traffic to any other node runs at its own NIC's rate whatever
//! the distance. The model therefore prices a group that leaves its node at the NIC's
//! bandwidth, and charges a larger latency for it.
//!
//! **Calibration**, one set of figures per device, none fitted to a training run:
//! - achievable matmul throughput, the Maximum Achievable Matmul FLOPS of Bekman's *Machine
//!   Learning Engineering* (the MAMF table: A100 SXM 271.2 of 312 TFLOP/s, 86.9%; H100 SXM
//!   794.5 of 989, 80.3%; GH200, the H200's memory, 828.6, 83.8%). TPUs have no such table;
//!   the model takes the H100's 80% for them and says so.
//! - bus bandwidth: NCCL reaches about 80% of NVLink's line rate and 90% of a 400 Gb/s or
//!   200 Gb/s NIC's on large messages (nccl-tests' bus bandwidth, the order DGX acceptance
//!   runs report). These two are assumptions, not a cited table; docs/cost.md says so.

use super::collective::Link;
use super::device::{ComputeDType, Device, LinkClass, Topology};

/// The most nodes a GPU cluster may have (16,384 GPUs).
pub const MAX_NODES: usize = 2048;

/// The most TensorCores a TPU slice name may give (a v5p pod has 8,960 chips).
pub const MAX_TPU_CORES: usize = 17920;

/// The fraction of NVLink's line rate NCCL's collectives reach (an assumption, see above).
pub const NVLINK_BUS_EFFICIENCY: f64 = 0.8;
/// The fraction of a NIC's line rate they reach across nodes.
pub const NIC_BUS_EFFICIENCY: f64 = 0.9;
/// Latency per ring step inside a node, and across nodes.
const NVLINK_ALPHA_S: f64 = 5e-6;
const NETWORK_ALPHA_S: f64 = 10e-6;

/// An 8-GPU node's device and links.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpu {
    /// The name in topology names: `a100`, `a100-40gb`, `h100`, `h200`.
    pub name: &'static str,
    pub peak_bf16: f64,
    pub peak_f32: f64,
    pub mem_bandwidth: f64,
    pub mem_capacity: f64,
    /// NVLink bandwidth each way per GPU, and the NIC's, at line rate.
    pub nvlink_bytes_per_s: f64,
    pub nic_bytes_per_s: f64,
    /// Achievable matmul throughput over the peak (MAMF).
    pub matmul_efficiency: f64,
}

/// The GPUs a cluster can be made of.
pub const GPUS: [Gpu; 4] = [
    Gpu {
        name: "a100",
        peak_bf16: 312e12,
        peak_f32: 19.5e12,
        mem_bandwidth: 2.039e12,
        mem_capacity: 80e9,
        nvlink_bytes_per_s: 300e9,
        nic_bytes_per_s: 25e9,
        matmul_efficiency: 271.2 / 312.0,
    },
    Gpu {
        name: "a100-40gb",
        peak_bf16: 312e12,
        peak_f32: 19.5e12,
        mem_bandwidth: 1.555e12,
        mem_capacity: 40e9,
        nvlink_bytes_per_s: 300e9,
        nic_bytes_per_s: 25e9,
        matmul_efficiency: 271.2 / 312.0,
    },
    Gpu {
        name: "h100",
        peak_bf16: 989.4e12,
        peak_f32: 66.9e12,
        mem_bandwidth: 3.35e12,
        mem_capacity: 80e9,
        nvlink_bytes_per_s: 450e9,
        nic_bytes_per_s: 50e9,
        matmul_efficiency: 794.5 / 989.4,
    },
    Gpu {
        name: "h200",
        peak_bf16: 989.4e12,
        peak_f32: 66.9e12,
        mem_bandwidth: 4.8e12,
        mem_capacity: 141e9,
        nvlink_bytes_per_s: 450e9,
        nic_bytes_per_s: 50e9,
        matmul_efficiency: 828.6 / 989.4,
    },
];

impl Gpu {
    fn device(&self) -> Device {
        Device {
            peak_bf16: self.peak_bf16,
            peak_f16: self.peak_bf16,
            peak_f32: self.peak_f32,
            mem_bandwidth: self.mem_bandwidth,
            mem_capacity: self.mem_capacity,
            matmul_efficiency: self.matmul_efficiency,
            kernels: None,
        }
    }

    /// `nodes` nodes of eight, named `name`.
    pub fn cluster(&self, name: String, nodes: usize) -> Topology {
        let nvlink = LinkClass {
            name: "NVLink",
            block: 8,
            link: Link {
                alpha_s: NVLINK_ALPHA_S,
                beta_bytes_per_s: self.nvlink_bytes_per_s * NVLINK_BUS_EFFICIENCY,
            },
            torus: None,
        };
        let mut links = vec![nvlink];
        if nodes > 1 {
            links.push(LinkClass {
                name: "network",
                block: 8 * nodes,
                link: Link {
                    alpha_s: NETWORK_ALPHA_S,
                    beta_bytes_per_s: self.nic_bytes_per_s * NIC_BUS_EFFICIENCY,
                },
                torus: None,
            });
        }
        let placement = if nodes == 1 {
            "rank r on GPU r of one 8-GPU NVLink node"
        } else {
            "rank r on GPU r mod 8 of node r / 8; nodes on a rail-optimised, non-blocking fat \
             tree at each GPU's NIC rate"
        };
        Topology {
            name: leak(name),
            devices: 8 * nodes,
            device: self.device(),
            links,
            default_dtype: ComputeDType::Bf16,
            placement,
            devices_of_ranks: None,
        }
    }
}

/// A TPU generation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tpu {
    /// `v5e` or `v5p`.
    pub name: &'static str,
    pub peak_bf16: f64,
    pub mem_bandwidth: f64,
    pub mem_capacity: f64,
    /// ICI bandwidth per link each way.
    pub ici_bytes_per_s: f64,
    /// TensorCores per chip (what Cloud's slice names count).
    pub cores_per_chip: usize,
}

/// The TPU generations.
pub const TPUS: [Tpu; 2] = [
    Tpu {
        name: "v5e",
        peak_bf16: 197e12,
        mem_bandwidth: 819e9,
        mem_capacity: 16.0 * 1073741824.0,
        ici_bytes_per_s: 45e9,
        cores_per_chip: 1,
    },
    Tpu {
        name: "v5p",
        peak_bf16: 459e12,
        mem_bandwidth: 2.765e12,
        mem_capacity: 95e9,
        ici_bytes_per_s: 90e9,
        cores_per_chip: 2,
    },
];

/// The matmul efficiency a TPU is priced at: no MAMF table covers TPUs, so the H100's.
pub const TPU_MATMUL_EFFICIENCY: f64 = 794.5 / 989.4;

impl Tpu {
    /// The torus of a slice of `chips` chips: v5e slices are 2-D (rows × columns, the
    /// pod 16 × 16), v5p slices 3-D cuboids, each side at most twice the next.
    pub fn torus(&self, chips: usize) -> Option<[usize; 3]> {
        if chips == 0 || !chips.is_power_of_two() {
            return None;
        }
        let k = chips.trailing_zeros() as usize;
        if self.name == "v5e" {
            let (rows, cols) = (1usize << (k / 2), 1usize << k.div_ceil(2));
            return (cols <= 16).then_some([1, rows, cols]);
        }
        let mut dims = [1usize; 3];
        for i in 0..k {
            dims[2 - i % 3] *= 2;
        }
        Some(dims)
    }

    /// A slice of `cores` TensorCores, named `name`.
    pub fn slice(&self, name: String, cores: usize) -> Option<Topology> {
        if !cores.is_multiple_of(self.cores_per_chip) {
            return None;
        }
        let chips = cores / self.cores_per_chip;
        let dims = self.torus(chips)?;
        Some(Topology {
            name: leak(name),
            devices: chips,
            device: Device {
                peak_bf16: self.peak_bf16,
                peak_f16: self.peak_bf16,
                peak_f32: self.peak_bf16,
                mem_bandwidth: self.mem_bandwidth,
                mem_capacity: self.mem_capacity,
                matmul_efficiency: TPU_MATMUL_EFFICIENCY,
                kernels: None,
            },
            links: vec![LinkClass {
                name: "ICI",
                block: chips,
                link: Link {
                    alpha_s: NVLINK_ALPHA_S,
                    beta_bytes_per_s: self.ici_bytes_per_s,
                },
                torus: Some(dims),
            }],
            default_dtype: ComputeDType::Bf16,
            placement: "rank r on chip r of the slice's torus, in row-major order",
            devices_of_ranks: None,
        })
    }
}

/// `name` as a `&'static str` (a topology keeps its name so estimates stay cheap to clone):
/// a preset's own when it is one of [`super::device::PRESETS`], else leaked once per call
/// (a command prices one topology; the playground offers only the presets).
fn leak(name: String) -> &'static str {
    match super::device::PRESETS.iter().find(|&&p| p == name) {
        Some(&known) => known,
        None => Box::leak(name.into_boxed_str()),
    }
}

/// A cluster or slice by name: `<gpu>x8x<nodes>` (`h100x8` is one node), or
/// `tpu-<v5e|v5p>-<cores>`. `None` when the name is none of these.
pub fn by_name(name: &str) -> Option<Topology> {
    if let Some(rest) = name.strip_prefix("tpu-") {
        let (gen, cores) = rest.split_once('-')?;
        let tpu = TPUS.iter().find(|t| t.name == gen)?;
        let cores = parse_count(cores)?;
        if cores > MAX_TPU_CORES {
            return None;
        }
        return tpu.slice(name.to_string(), cores);
    }
    let (gpu, rest) = name.split_once("x8")?;
    let gpu = GPUS.iter().find(|g| g.name == gpu)?;
    let nodes = match rest {
        "" => 1,
        _ => parse_count(rest.strip_prefix('x')?)?,
    };
    (1..=MAX_NODES)
        .contains(&nodes)
        .then(|| gpu.cluster(name.to_string(), nodes))
}

/// A positive count written in plain digits (no sign, no leading zero).
fn parse_count(s: &str) -> Option<usize> {
    if s.is_empty() || s.len() > 6 || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The families of names, for help texts and errors.
pub const NAME_FORMS: &str =
    "a100x8xN, a100-40gbx8xN, h100x8xN, h200x8xN (N: 1 to 2048 nodes), tpu-v5e-N, tpu-v5p-N";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_into_their_sizes() {
        assert_eq!(by_name("h100x8x2048").map(|t| t.devices), Some(16384));
        assert_eq!(by_name("a100x8x384").map(|t| t.devices), Some(3072));
        assert_eq!(by_name("h200x8").map(|t| t.devices), Some(8));
        assert_eq!(by_name("tpu-v5p-128").map(|t| t.devices), Some(64));
        assert_eq!(by_name("tpu-v5e-256").map(|t| t.devices), Some(256));
        for bad in [
            "h100x8x0",
            "h100x8x2049",
            "h100x8x02",
            "h100x8x-1",
            "h100x8x",
            "b200x8x2",
            "tpu-v5e-512",
            "tpu-v5e-12",
            "tpu-v5p-3",
            "tpu-v4-8",
            "h100x8x99999999999999999999",
        ] {
            assert!(by_name(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_v5p_slice_is_a_cuboid_of_its_chips() {
        let v5p = TPUS[1];
        assert_eq!(v5p.torus(64), Some([4, 4, 4]));
        assert_eq!(v5p.torus(128), Some([4, 4, 8]));
        assert_eq!(v5p.torus(2), Some([1, 1, 2]));
        assert_eq!(TPUS[0].torus(16), Some([1, 4, 4]));
        assert_eq!(TPUS[0].torus(32), Some([1, 4, 8]));
    }
}
