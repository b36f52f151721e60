//! Devices and their links, as presets. A plan's rank r runs on the preset's device r (the
//! first devices in the preset's order); a group's collective runs over the slowest link
//! class that connects all its members.
//!
//! The GPU clusters and TPU slices, with their sources and calibration, are in
//! `hardware.rs` (`h100x8x2048`, `tpu-v5p-128`, ...). Besides them:
//! - `cpu`: this machine, measured when `shardlab cost` runs on it (the executor's GEMM, an
//!   elementwise kernel, and the threads' exchange: `cli/calibrate.rs`). Without a
//!   measurement (the browser) the figures are nominal ones for a small laptop, marked so.
//!
//! On a torus (a TPU slice) no wraparound is assumed: a group along one torus dimension is
//! priced at one link's bandwidth (a ring laid on a line uses each link both ways). A group
//! that spans k dimensions runs its collective along all k at once (a share of the data
//! each way round), so it gets k links' bandwidth: the scaling book's "bandwidth scales
//! with the number of axes" (How to Scale Your Model, the collectives chapter). An f32
//! matmul on a TPU runs as one bf16 pass at XLA's default precision, so f32 gets the bf16
//! peak.
//!
//! Latency α is not on any datasheet. The presets use 5 µs per ring step over NVLink and
//! ICI, and 10 µs over InfiniBand: the order of the small-message times NCCL's tests report
//! divided by the ring's steps. Treat them as assumptions; they matter only for small
//! messages.

use super::collective::Link;

/// The precision the cost model prices compute at (independent of the executor's f32/f64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ComputeDType {
    Bf16,
    F16,
    F32,
}

impl ComputeDType {
    /// Bytes per element.
    pub fn bytes(self) -> f64 {
        match self {
            ComputeDType::Bf16 | ComputeDType::F16 => 2.0,
            ComputeDType::F32 => 4.0,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ComputeDType::Bf16 => "bf16",
            ComputeDType::F16 => "f16",
            ComputeDType::F32 => "f32",
        }
    }
}

/// One device: peak compute per precision and memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Device {
    /// Dense peak FLOP/s at bf16, f16 and f32.
    pub peak_bf16: f64,
    pub peak_f16: f64,
    pub peak_f32: f64,
    /// Memory bandwidth, bytes/s, and capacity, bytes.
    pub mem_bandwidth: f64,
    pub mem_capacity: f64,
    /// The fraction of the peak a large matmul reaches (1 where the peak is measured, as on
    /// `cpu`): FLOPs are priced at peak × this.
    pub matmul_efficiency: f64,
    /// The executor's own kernels (`cpu` only): what neither the peak nor the memory
    /// bandwidth describes.
    pub kernels: Option<CpuKernels>,
}

/// How the CPU executor's kernels run, measured: element loops (which convert through f64)
/// at a rate that depends on whether their data stays in cache, and a fixed cost per GEMM
/// call (packing, dispatch) that small batched matmuls pay once per batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuKernels {
    /// Elements per second of an elementwise kernel on a few thousand elements (in cache)
    /// and on millions (from memory).
    pub rate_small: f64,
    pub rate_large: f64,
    /// Seconds per GEMM call beyond its FLOPs at the peak.
    pub gemm_call_s: f64,
    /// How many ranks share a core's cache: a kernel's working set counts this many times.
    pub crowding: f64,
}

/// The element counts between which the kernel rate moves from `rate_small` to
/// `rate_large` (log-linearly): the sizes the calibration measures.
pub const SMALL_KERNEL_ELEMS: f64 = 8192.0;
pub const LARGE_KERNEL_ELEMS: f64 = 2097152.0;

impl CpuKernels {
    /// Elements per second of an elementwise kernel over `elems` elements.
    pub fn rate(&self, elems: f64) -> f64 {
        let elems = elems * self.crowding.max(1.0);
        if elems <= SMALL_KERNEL_ELEMS {
            return self.rate_small;
        }
        if elems >= LARGE_KERNEL_ELEMS {
            return self.rate_large;
        }
        let t = (elems.ln() - SMALL_KERNEL_ELEMS.ln())
            / (LARGE_KERNEL_ELEMS.ln() - SMALL_KERNEL_ELEMS.ln());
        (self.rate_small.ln() * (1.0 - t) + self.rate_large.ln() * t).exp()
    }
}

impl Device {
    /// Peak FLOP/s at `dtype`.
    pub fn peak(&self, dtype: ComputeDType) -> f64 {
        match dtype {
            ComputeDType::Bf16 => self.peak_bf16,
            ComputeDType::F16 => self.peak_f16,
            ComputeDType::F32 => self.peak_f32,
        }
    }
}

/// A class of link: devices in the same block of `block` consecutive devices talk over it
/// (the innermost class whose block holds a whole group is the one its collectives use).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkClass {
    pub name: &'static str,
    pub block: usize,
    pub link: Link,
    /// A torus of `[x, y, z]` devices in row-major order (a TPU slice; a 2-D one has
    /// x = 1): a group whose members differ in k coordinates runs its collective along k
    /// dimensions at once, on k times the links (the scaling book's multi-axis collectives).
    pub torus: Option<[usize; 3]>,
}

/// A set of devices and their links.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub name: &'static str,
    pub devices: usize,
    pub device: Device,
    /// Innermost first; the last holds every device.
    pub links: Vec<LinkClass>,
    /// The compute precision used unless asked otherwise.
    pub default_dtype: ComputeDType,
    /// How a plan's ranks map onto the devices, in words.
    pub placement: &'static str,
    /// Rank r runs on device `devices_of_ranks[r]` (`None`: on device r). The planner's
    /// search prices one planned mesh under each order of its axes this way: relabelling
    /// ranks is all an axis order changes.
    pub devices_of_ranks: Option<std::sync::Arc<[u32]>>,
}

/// Why a plan cannot be costed on a topology.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("unknown topology `{0}` (known: cpu, {forms})", forms = super::hardware::NAME_FORMS)]
    Unknown(String),
    #[error("rank {rank} has no device: {topology} has {devices} devices (ranks run on devices 0 to {last})", last = devices - 1)]
    TooFewDevices {
        rank: u32,
        topology: &'static str,
        devices: usize,
    },
}

/// Examples of preset names, for help texts (`cpu` is this machine, measured; any node
/// count or slice size of `hardware::NAME_FORMS` is a preset too).
pub const PRESETS: [&str; 9] = [
    "cpu",
    "h100x8",
    "h100x8x2",
    "h100x8x4",
    "h100x8x16",
    "a100x8x384",
    "h100x8x2048",
    "tpu-v5e-16",
    "tpu-v5p-128",
];

impl Topology {
    /// A preset by name: `cpu`, or a cluster or slice of `hardware::by_name`.
    pub fn preset(name: &str) -> Result<Topology, TopologyError> {
        if name == "cpu" {
            return Ok(Topology::cpu(CpuCalibration::default()));
        }
        super::hardware::by_name(name).ok_or_else(|| TopologyError::Unknown(name.to_string()))
    }

    /// This machine, from a calibration.
    pub fn cpu(c: CpuCalibration) -> Topology {
        Topology {
            name: "cpu",
            devices: c.devices,
            device: Device {
                peak_bf16: c.flops,
                peak_f16: c.flops,
                peak_f32: c.flops,
                mem_bandwidth: c.mem_bandwidth,
                mem_capacity: c.mem_capacity,
                matmul_efficiency: 1.0,
                kernels: Some(CpuKernels {
                    rate_small: c.kernel_rate_small,
                    rate_large: c.kernel_rate,
                    gemm_call_s: c.gemm_call_s,
                    crowding: c.crowding,
                }),
            },
            links: vec![LinkClass {
                name: "shared memory",
                block: c.devices,
                link: c.link,
                torus: None,
            }],
            default_dtype: ComputeDType::F32,
            placement: "every rank a thread of this machine",
            devices_of_ranks: None,
        }
    }

    /// The link a group's collectives run over: its link class's, with a torus's bandwidth
    /// multiplied by the number of torus dimensions the group spans (each dimension's links
    /// carry half the data at once; no wraparound is assumed, see the module doc).
    pub fn effective_link(&self, group: &[u32]) -> Result<Link, TopologyError> {
        let devices = self.devices_of(group);
        let group = &devices[..];
        let class = self.link_for_devices(group)?;
        let Some([_, y, z]) = class.torus else {
            return Ok(class.link);
        };
        let (y, z) = (y.max(1), z.max(1));
        let coords = |d: u32| {
            let d = d as usize;
            [d / (y * z), (d / z) % y, d % z]
        };
        let first = group.first().map(|&d| coords(d));
        let dims = (0..3)
            .filter(|&k| first.is_some_and(|f| group.iter().any(|&d| coords(d)[k] != f[k])))
            .count()
            .max(1);
        Ok(Link {
            beta_bytes_per_s: class.link.beta_bytes_per_s * dims as f64,
            ..class.link
        })
    }

    /// The link class a group's collectives run over: the innermost whose block holds all
    /// its members.
    pub fn link_for(&self, group: &[u32]) -> Result<&LinkClass, TopologyError> {
        self.link_for_devices(&self.devices_of(group))
    }

    /// The devices a group of ranks runs on (a rank without a device keeps its number, which
    /// [`Topology::link_for`] then reports).
    pub fn devices_of<'a>(&self, ranks: &'a [u32]) -> std::borrow::Cow<'a, [u32]> {
        match &self.devices_of_ranks {
            None => std::borrow::Cow::Borrowed(ranks),
            Some(map) => ranks
                .iter()
                .map(|&r| map.get(r as usize).copied().unwrap_or(r))
                .collect(),
        }
    }

    fn link_for_devices(&self, group: &[u32]) -> Result<&LinkClass, TopologyError> {
        if let Some(&r) = group.iter().find(|&&r| r as usize >= self.devices) {
            return Err(TopologyError::TooFewDevices {
                rank: r,
                topology: self.name,
                devices: self.devices,
            });
        }
        let fits = |c: &&LinkClass| {
            let block = |r: u32| r as usize / c.block.max(1);
            group.windows(2).all(|w| block(w[0]) == block(w[1]))
        };
        self.links
            .iter()
            .find(fits)
            .or_else(|| self.links.last())
            .ok_or(TopologyError::Unknown(self.name.to_string()))
    }
}

/// This machine's measured figures (see `shardlab cost --calibrate`).
#[derive(Clone, Debug, PartialEq)]
pub struct CpuCalibration {
    pub devices: usize,
    pub flops: f64,
    pub mem_bandwidth: f64,
    /// Elements per second of an elementwise kernel from memory (see `CpuKernels`).
    pub kernel_rate: f64,
    /// The same on a cache-resident kernel.
    pub kernel_rate_small: f64,
    /// Seconds per GEMM call beyond its FLOPs.
    pub gemm_call_s: f64,
    /// How many ranks share each core's cache (1 when each rank has a core).
    pub crowding: f64,
    pub mem_capacity: f64,
    pub link: Link,
}

impl CpuCalibration {
    /// The figures each of `ranks` threads gets when they share `cores` cores: compute and
    /// memory throughput divided among them (the exchange between threads is unchanged).
    ///
    /// With more ranks than cores, the threads that take turns on a core share its cache:
    /// a kernel's working set counts `ranks / cores` times (`crowding`).
    pub fn shared_by(&self, ranks: usize, cores: usize) -> CpuCalibration {
        let share = (cores.max(1) as f64 / ranks.max(1) as f64).min(1.0);
        CpuCalibration {
            flops: self.flops * share,
            mem_bandwidth: self.mem_bandwidth * share,
            kernel_rate: self.kernel_rate * share,
            kernel_rate_small: self.kernel_rate_small * share,
            crowding: 1.0 / share,
            ..self.clone()
        }
    }
}

impl Default for CpuCalibration {
    /// Nominal figures for a small laptop, used only where nothing was measured: 100 GFLOP/s
    /// (the executor's f32 GEMM on the development machine, docs/benchmarks.md), 5 GB/s of memory
    /// bandwidth, 3·10⁸ elements/s through an elementwise kernel, and 20 µs and 2 GB/s
    /// between threads. Up to 1,024 ranks (threads).
    fn default() -> CpuCalibration {
        CpuCalibration {
            devices: 1024,
            flops: 100e9,
            mem_bandwidth: 5e9,
            kernel_rate: 3e8,
            kernel_rate_small: 6e8,
            gemm_call_s: 2e-6,
            crowding: 1.0,
            mem_capacity: 16e9,
            link: Link {
                alpha_s: 20e-6,
                beta_bytes_per_s: 2e9,
            },
        }
    }
}
