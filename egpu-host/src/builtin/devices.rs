//! The devices a process used, with the labels the driver gives them (issue 29): the `devices`
//! map, written by the preloaded library once per device (its UUID and name, asked of the driver
//! when the device is first used), read by the report, `egpu maps` and the metrics.

use egpu_maps::HashMap;

use super::{Builtin, DEVICE_SLOTS};

/// Devices the map holds at most.
pub(super) const DEVICES: u32 = 64;
/// Bytes of a device's name in the map (longer names are cut).
pub const DEVICE_NAME_BYTES: usize = 80;
/// Bytes of a device's value: its UUID, then its name.
pub(super) const DEVICE_BYTES: usize = 16 + DEVICE_NAME_BYTES;

/// A device a process used: its ordinal, its UUID as `nvidia-smi` writes it (`GPU-…`; empty when
/// the driver did not say) and its name (`NVIDIA H200`; empty when the driver did not say).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceLabel {
    /// The device's ordinal (`CUdevice`) in the process.
    pub index: u32,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, or empty.
    pub uuid: String,
    /// The device's name, or empty.
    pub name: String,
}

/// A UUID's 16 bytes as `nvidia-smi` writes them: `GPU-` and five groups of hex digits (8-4-4-4-12).
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// What the built-in probes counted on one device (`per_device`): copies and sets with their
/// bytes, allocations that succeeded with their bytes, kernel launches (not those captured into
/// graphs) with their blocks and the threads of their blocks summed (as the `shapes` line sums
/// them), graph launches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    /// The device's ordinal.
    pub index: u32,
    /// Copies and their bytes.
    pub copies: (u64, u64),
    /// Memory sets and their bytes.
    pub sets: (u64, u64),
    /// Allocations and their bytes.
    pub allocations: (u64, u64),
    /// Kernel launches, the blocks of their grids and the threads of their blocks, summed.
    pub launches: (u64, u64, u64),
    /// Graph launches.
    pub graph_launches: u64,
}

impl Builtin {
    /// What the built-in probes counted per device, for the devices with any count, by ordinal.
    pub fn device_counts(&self) -> Vec<DeviceCounts> {
        let tally = |d: u32, slot: u32| {
            let t = self.total(&self.per_device, d * DEVICE_SLOTS + slot);
            (t.count, t.bytes)
        };
        (0..DEVICES)
            .map(|index| {
                let ((launches, blocks), (graph_launches, threads)) =
                    (tally(index, 3), tally(index, 4));
                DeviceCounts {
                    index,
                    copies: tally(index, 0),
                    sets: tally(index, 1),
                    allocations: tally(index, 2),
                    launches: (launches, blocks, threads),
                    graph_launches,
                }
            })
            .filter(|c| DeviceCounts { index: c.index, ..DeviceCounts::default() } != *c)
            .collect()
    }

    /// Records device `index`'s UUID (`None`: the driver did not say) and name (cut to
    /// [`DEVICE_NAME_BYTES`] − 1 bytes); false when the map is full.
    pub fn record_device(&self, index: u32, uuid: Option<[u8; 16]>, name: &str) -> bool {
        let mut value = [0u8; DEVICE_BYTES];
        if let Some(uuid) = uuid {
            value[..16].copy_from_slice(&uuid);
        }
        let n = name.len().min(DEVICE_NAME_BYTES - 1);
        value[16..16 + n].copy_from_slice(&name.as_bytes()[..n]);
        HashMap::<u64, [u8; DEVICE_BYTES]>::from_raw(self.devices.clone())
            .is_ok_and(|devices| devices.insert(&u64::from(index), &value).is_ok())
    }

    /// The devices recorded, by ordinal.
    pub fn devices(&self) -> Vec<DeviceLabel> {
        let Ok(map) = HashMap::<u64, [u8; DEVICE_BYTES]>::from_raw(self.devices.clone()) else {
            return Vec::new();
        };
        let mut devices: Vec<DeviceLabel> = map
            .iter()
            .filter_map(|(index, value)| {
                let index = u32::try_from(index).ok()?;
                let uuid: [u8; 16] = value[..16].try_into().ok()?;
                let uuid = if uuid == [0; 16] { String::new() } else { uuid_text(&uuid) };
                let name = &value[16..];
                let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
                let name = String::from_utf8_lossy(&name[..end]).into_owned();
                Some(DeviceLabel { index, uuid, name })
            })
            .collect();
        devices.sort_by_key(|d| d.index);
        devices
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_is_written_as_nvidia_smi_writes_it() {
        let bytes: [u8; 16] = *b"egpu-stand-in-\x00\x01";
        assert_eq!(uuid_text(&bytes), "GPU-65677075-2d73-7461-6e64-2d696e2d0001");
    }

    /// The `gpu_cuda_*` series counted per device: one per device with a count, labelled
    /// `gpu_index`, exactly what each device did, and what no device holds under the process
    /// alone (here: launches on a device past the map's 64), so that they sum to the totals.
    #[test]
    fn series_counted_per_device_are_one_per_device_and_sum_to_the_totals() {
        use egpu_ebpf::{AllocCtx, LaunchCtx, MemcpyCtx, Phase};
        let probes = crate::HostProbes::new();
        let b = Builtin::create(4347, false).expect("maps in process memory");
        for (program, maps) in b.programs().expect("the programs") {
            probes.attach(&program, &maps).expect("attach");
        }
        let launch = |device, kernel_id| LaunchCtx {
            kernel_id,
            grid: [1, 1, 1],
            device,
            ..Default::default()
        };
        for (device, n) in [(0, 4), (1, 7), (70, 2)] {
            for _ in 0..n {
                probes.fire(Phase::Enter, &mut launch(device, 5));
            }
        }
        probes.fire(Phase::Enter, &mut launch(1, u64::MAX));
        for (device, bytes) in [(0, 64), (1, 128), (1, 256)] {
            let mut alloc = AllocCtx { bytes, device, ..Default::default() };
            probes.fire(Phase::Exit, &mut alloc);
        }
        let mut set =
            MemcpyCtx { bytes: 10, flags: MemcpyCtx::MEMSET, device: 1, ..Default::default() };
        probes.fire(Phase::Enter, &mut set);
        let metrics = super::super::metrics(std::slice::from_ref(&b), Default::default());
        let series = |name: &str| -> Vec<(Option<String>, u64)> {
            let m = metrics.iter().find(|m| m.prometheus == name).expect("the metric");
            m.points
                .iter()
                .map(|p| {
                    let device = p.attributes.iter().find(|a| a.0 == "gpu_index");
                    let super::super::Value::Counter(n) = p.value else { panic!("a counter") };
                    (device.map(|a| a.1.clone()), n)
                })
                .collect()
        };
        let on = |d: &str, n| (Some(d.to_string()), n);
        let want = [
            ("gpu_cuda_kernel_launch_calls_total", vec![on("0", 4), on("1", 7), (None, 2)]),
            ("gpu_cuda_graph_launch_calls_total", vec![on("1", 1)]),
            ("gpu_cuda_memory_allocations_bytes_total", vec![on("0", 64), on("1", 384)]),
            ("gpu_cuda_memset_bytes_total", vec![on("1", 10)]),
            // Not counted per device: the process's one series.
            ("gpu_cuda_memory_free_bytes_total", vec![(None, 0)]),
        ];
        let mut exact = 0;
        for (name, want) in &want {
            let got = series(name);
            assert_eq!(&got, want, "{name}");
            exact += usize::from(&got == want);
        }
        println!("gpu_cuda series per device exact: {exact}/{} metrics", want.len());
        // Every point's labels: `pid`, then the device's ordinal.
        let calls = metrics.iter().find(|m| m.prometheus == "gpu_cuda_kernel_launch_calls_total");
        let labels: Vec<&str> =
            calls.expect("calls").points[0].attributes.iter().map(|a| a.0).collect();
        assert_eq!(labels, ["pid", "gpu_index"]);
    }

    #[test]
    fn devices_are_recorded_once_each_and_read_back_in_order() {
        let b = Builtin::create(std::process::id(), false).expect("the maps");
        assert!(b.devices().is_empty());
        let long = "N".repeat(200);
        assert!(b.record_device(1, Some([7; 16]), &long));
        assert!(b.record_device(0, None, "Stand-in GPU"));
        assert!(b.record_device(0, None, "Stand-in GPU"));
        let devices = b.devices();
        assert_eq!(devices.len(), 2, "{devices:?}");
        assert_eq!(
            devices[0],
            DeviceLabel { index: 0, uuid: "".into(), name: "Stand-in GPU".into() }
        );
        assert_eq!(devices[1].uuid, "GPU-07070707-0707-0707-0707-070707070707");
        assert_eq!(devices[1].name.len(), DEVICE_NAME_BYTES - 1);
        // In the report, and as the labels of the info metric.
        let report = b.report(None);
        assert!(report.contains("\ndevice 0 - Stand-in GPU\n"), "{report}");
        let line = format!("\ndevice 1 GPU-07070707-0707-0707-0707-070707070707 {long:.79}\n");
        assert!(report.contains(&line), "{report}");
        let metrics = super::super::metrics(std::slice::from_ref(&b), Default::default());
        let info = metrics.iter().find(|m| m.prometheus == "egpu_cuda_device_info");
        let info = info.expect("the devices' info metric");
        let labels: Vec<Vec<(&str, String)>> =
            info.points.iter().map(|p| p.attributes.clone()).collect();
        let pid = std::process::id().to_string();
        let first = vec![
            ("pid", pid.clone()),
            ("gpu_index", "0".to_string()),
            ("gpu_uuid", String::new()),
            ("gpu_name", "Stand-in GPU".to_string()),
        ];
        assert_eq!(labels.len(), 2, "{labels:?}");
        assert_eq!(labels[0], first);
        assert_eq!(labels[1][2].1, "GPU-07070707-0707-0707-0707-070707070707");
        assert!(info.points.iter().all(|p| p.value == super::super::Value::Gauge(1.0)));
    }
}
