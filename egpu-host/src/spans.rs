//! Launch spans (issue 28, OpenTelemetry traces): one record per kernel launch made while the
//! launching thread had a W3C trace context set (`egpu::host::tags`), written by the preloaded
//! library to a ring buffer in shared memory (`egpu-<pid>-spans`, [`SpanRing`]) and read by
//! `egpu run --otlp`, which exports each as an OTLP span parented by the thread's span.
//!
//! A full ring drops the record and counts it ([`SpanRing::drops`]): a launch never waits.

use bytemuck::{Pod, Zeroable};
use egpu_maps::{MapError, Placement, RingBuf, Shards};

/// The shared objects' names of the span ring (see [`crate::builtin::shared_name`]).
pub const MAPS: [&str; 1] = ["spans"];

/// Records the ring holds before it drops.
pub const CAPACITY: u32 = 8192;

/// [`SpanRecord::clock`]: the span's start and end are the host call's entry and exit
/// (`CLOCK_REALTIME`), not the kernel's time on the GPU.
pub const CLOCK_HOST_CALL: u64 = 1;

/// [`SpanRecord::clock`]: the span's start and end are the kernel's on the GPU, from the CUDA
/// events around it (`EGPU_KERNEL_TIMES`), mapped to `CLOCK_REALTIME` by an anchor event
/// recorded once per context on an idle stream of egpu's own and waited for.
pub const CLOCK_GPU_EVENTS: u64 = 2;

/// One launch's span.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct SpanRecord {
    /// The trace id: its high 64 bits, then its low.
    pub trace_id: [u64; 2],
    /// The parent span id: the thread's span when it launched.
    pub parent_span_id: u64,
    /// This span's id (never 0).
    pub span_id: u64,
    /// The start, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// The end, in nanoseconds since the Unix epoch.
    pub end_ns: u64,
    /// The kernel's id (`Builtin::name` names it; 0 when the driver could not name it).
    pub kernel: u64,
    /// The launch's site (0: none).
    pub site_id: u64,
    /// The launch's tag (0: none).
    pub tag_id: u64,
    /// Where `start_ns` and `end_ns` come from: [`CLOCK_HOST_CALL`] or [`CLOCK_GPU_EVENTS`].
    pub clock: u64,
    /// The launch call's `CUresult`.
    pub result: u64,
}

/// A process's span ring, in shared memory (or process memory when it cannot be had).
#[derive(Debug)]
pub struct SpanRing {
    ring: RingBuf<SpanRecord>,
}

impl SpanRing {
    /// Creates process `pid`'s ring, in shared memory when `shared`.
    pub fn create(pid: u32, shared: bool) -> Result<SpanRing, MapError> {
        if shared {
            let name = crate::builtin::shared_name(pid, MAPS[0]);
            let _ = egpu_maps::unlink_shared(&name);
            if let Ok(ring) = RingBuf::create(CAPACITY, Shards::ONE, Placement::Shared(name.into()))
            {
                return Ok(SpanRing { ring });
            }
        }
        Ok(SpanRing { ring: RingBuf::create(CAPACITY, Shards::ONE, Placement::Process)? })
    }

    /// Opens process `pid`'s ring, in shared memory.
    pub fn open(pid: u32) -> Result<SpanRing, MapError> {
        let name = crate::builtin::shared_name(pid, MAPS[0]);
        Ok(SpanRing { ring: RingBuf::open_shared(&name)? })
    }

    /// Writes `record`; false when the ring was full (the record dropped and counted).
    pub fn output(&self, record: &SpanRecord) -> bool {
        self.ring.output(record).is_ok()
    }

    /// Takes the records written since the last call (empty while another consumer reads).
    pub fn drain(&self) -> Vec<SpanRecord> {
        match self.ring.consumer() {
            Ok(mut consumer) => consumer.drain().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Records dropped because the ring was full.
    pub fn drops(&self) -> u64 {
        self.ring.try_raw().map_or(0, egpu_maps::RawMap::refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_go_through_in_order() {
        let ring = SpanRing::create(u32::MAX - 7, false).expect("a ring");
        let r =
            |n: u64| SpanRecord { span_id: n, start_ns: n, end_ns: n + 1, ..Default::default() };
        assert!(ring.output(&r(1)) && ring.output(&r(2)));
        assert_eq!(ring.drain(), [r(1), r(2)]);
        assert!(ring.drain().is_empty());
        assert_eq!(ring.drops(), 0);
    }

    #[test]
    fn a_full_ring_drops_and_counts() {
        let ring = SpanRing::create(u32::MAX - 8, false).expect("a ring");
        let written = (0..=u64::from(CAPACITY))
            .filter(|&n| ring.output(&SpanRecord { span_id: n, ..Default::default() }))
            .count();
        assert!(written >= CAPACITY as usize / 2 && written < CAPACITY as usize + 1, "{written}");
        assert_eq!(ring.drops(), u64::from(CAPACITY) + 1 - written as u64);
        assert_eq!(ring.drain().len(), written);
    }
}
