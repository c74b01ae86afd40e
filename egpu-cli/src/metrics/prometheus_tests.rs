//! The Prometheus rendering of real built-in maps, filled by the built-in probes: the series
//! `egpu-host`'s test counts, in both formats.

use std::time::Duration;

use super::*;
use crate::metrics::fixture::filled;

/// A collector of fixed processes and health, as a scrape would see them.
#[derive(Debug)]
struct Fixed(Vec<Builtin>, Health, MetricsOptions);

impl Collector for Fixed {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        encode_health(&self.1, &mut encoder)?;
        encode_builtin(&self.0, self.2, &mut encoder)
    }
}

fn rendered(processes: Vec<Builtin>, health: Health, options: MetricsOptions) -> (String, String) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Fixed(processes, health, options)));
    let (text, content_type) = render(&registry, None);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let (open, content_type) = render(&registry, Some("application/openmetrics-text;q=0.9,*/*"));
    assert_eq!(content_type, OPENMETRICS);
    (text, open)
}

const HEALTH: Health = Health {
    started: Duration::from_secs(1_700_000_000),
    scrapes: 3,
    seen: 1,
    running: 0,
    exit: Some(7),
};

/// The lines and formats of today's names (issue 18, item 9): the text format 0.0.4 as before
/// (histogram sums are now written as floats, `1024.0`), OpenMetrics when asked for; the series
/// counted per device labelled with the device (issue 29: the fixture's, device 0).
#[test]
fn item9_metrics_keep_their_names_in_both_formats() {
    let (text, open) = rendered(vec![filled()], HEALTH, MetricsOptions::default());
    for line in [
        "# TYPE gpu_cuda_kernel_launch_calls_total counter",
        "gpu_cuda_kernel_launch_calls_total{pid=\"4242\",gpu_index=\"0\"} 4",
        "gpu_cuda_graph_launch_calls_total{pid=\"4242\",gpu_index=\"0\"} 1",
        "egpu_cuda_kernel_captured_calls_total{pid=\"4242\"} 1",
        "# TYPE gpu_cuda_kernel_grid_size histogram",
        // Grids of 8 blocks (4 bits) three times, of 1000 (10 bits) once; none for the graph.
        "gpu_cuda_kernel_grid_size_bucket{pid=\"4242\",le=\"7\"} 0",
        "gpu_cuda_kernel_grid_size_bucket{pid=\"4242\",le=\"15\"} 3",
        "gpu_cuda_kernel_grid_size_bucket{pid=\"4242\",le=\"1023\"} 4",
        "gpu_cuda_kernel_grid_size_bucket{pid=\"4242\",le=\"+Inf\"} 4",
        "gpu_cuda_kernel_grid_size_sum{pid=\"4242\"} 1024.0",
        "gpu_cuda_kernel_block_size_bucket{pid=\"4242\",le=\"2047\"} 4",
        "gpu_cuda_kernel_block_size_sum{pid=\"4242\"} 1120.0",
        "# TYPE gpu_cuda_memory_allocations_bytes_total counter",
        "gpu_cuda_memory_allocations_bytes_total{pid=\"4242\",gpu_index=\"0\"} 1048576",
        "gpu_cuda_memory_copies_bytes_bucket{pid=\"4242\",cuda_memcpy_kind=\"HostToDevice\",le=\"4095\"} 0",
        "gpu_cuda_memory_copies_bytes_bucket{pid=\"4242\",cuda_memcpy_kind=\"HostToDevice\",le=\"8191\"} 2",
        "gpu_cuda_memory_copies_bytes_sum{pid=\"4242\",cuda_memcpy_kind=\"HostToDevice\"} 9096.0",
        "gpu_cuda_memory_copies_bytes_count{pid=\"4242\",cuda_memcpy_kind=\"DeviceToHost\"} 1",
        "gpu_cuda_memset_bytes_total{pid=\"4242\",gpu_index=\"0\"} 100",
        "gpu_cuda_memory_free_bytes_total{pid=\"4242\"} 1048576",
        "gpu_cuda_stream_synchronize_calls_total{pid=\"4242\"} 1",
        "gpu_cuda_device_synchronize_calls_total{pid=\"4242\"} 1",
        "egpu_modules_not_instrumentable_total{pid=\"4242\"} 1",
        // egpu's own.
        "egpu_build_info{version=\"0.1.0\"} 1",
        "egpu_start_time_seconds 1700000000.0",
        "egpu_metrics_scrapes_total 3",
        "egpu_processes_seen_total 1",
        "egpu_processes_running 0",
        "egpu_command_running 0",
        "egpu_command_exit_status 7",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        // The same series in OpenMetrics, typed under the name without `_total`.
        if let Some(name) = line.strip_prefix("# TYPE ") {
            let name = name.replace("_total counter", " counter");
            assert!(open.lines().any(|l| l == format!("# TYPE {name}")), "{name} in\n{open}");
        } else {
            let line = openmetrics_bucket(line);
            assert!(open.lines().any(|l| l == line), "{line:?} in\n{open}");
        }
    }
    assert!(open.contains("# UNIT gpu_cuda_memory_copies_bytes bytes\n"), "{open}");
    assert!(open.ends_with("# EOF\n"), "{open}");
    // Every sample line is `name{labels} value` or `name value`, a number.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = l.rsplit_once(' ').expect("a value");
        assert!(value.parse::<f64>().is_ok(), "{l}");
    }
    let (named, _) =
        rendered(vec![filled()], HEALTH, MetricsOptions::default().with_kernel_names(true));
    assert!(named.contains("{pid=\"4242\",cuda_kernel_name=\"_Z1av\"} 3\n"), "{named}");
    assert!(named.contains("cuda_kernel_name=\"k\\\"2\"} 1\n"), "names are escaped: {named}");
}

/// The kernel times from CUDA events and the synchronisations' (`--kernel-times`): histograms in
/// seconds, `_seconds` in their names, `# UNIT seconds` in OpenMetrics; per kernel with names.
#[test]
fn kernel_and_synchronisation_durations_are_seconds() {
    let (text, open) = rendered(vec![filled()], HEALTH, MetricsOptions::default());
    for line in [
        "# TYPE gpu_cuda_kernel_duration_seconds histogram",
        // 4000 ns twice (bucket 12, up to 4095 ns), 1 ms once (bucket 20).
        "gpu_cuda_kernel_duration_seconds_bucket{pid=\"4242\",le=\"2.047e-06\"} 0",
        "gpu_cuda_kernel_duration_seconds_bucket{pid=\"4242\",le=\"4.095e-06\"} 2",
        "gpu_cuda_kernel_duration_seconds_bucket{pid=\"4242\",le=\"0.001048575\"} 3",
        "gpu_cuda_kernel_duration_seconds_bucket{pid=\"4242\",le=\"+Inf\"} 3",
        "gpu_cuda_kernel_duration_seconds_sum{pid=\"4242\"} 0.001008",
        "gpu_cuda_kernel_duration_seconds_count{pid=\"4242\"} 3",
        "# TYPE gpu_cuda_synchronize_duration_seconds histogram",
        "gpu_cuda_synchronize_duration_seconds_count{pid=\"4242\",cuda_synchronize_kind=\"Context\"} 1",
        "gpu_cuda_synchronize_duration_seconds_sum{pid=\"4242\",cuda_synchronize_kind=\"Context\"} 0.0000015",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
    }
    assert!(open.contains("# UNIT gpu_cuda_kernel_duration_seconds seconds\n"), "{open}");
    assert!(open.contains("# TYPE gpu_cuda_synchronize_duration_seconds histogram\n"), "{open}");
    let (named, _) =
        rendered(vec![filled()], HEALTH, MetricsOptions::default().with_kernel_names(true));
    let series =
        "gpu_cuda_kernel_duration_seconds_count{pid=\"4242\",cuda_kernel_name=\"_Z1av\"} 2";
    assert!(named.lines().any(|l| l == series), "{named}");
}

/// With no process seen and the command running, egpu's own series are served all the same.
#[test]
fn item9_metrics_serve_health_with_no_process() {
    let health = Health { seen: 0, scrapes: 1, exit: None, ..HEALTH };
    let (text, open) = rendered(Vec::new(), health, MetricsOptions::default());
    for line in
        ["egpu_processes_seen_total 0", "egpu_command_running 1", "egpu_metrics_scrapes_total 1"]
    {
        assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        assert!(open.lines().any(|l| l == line), "{line:?} in\n{open}");
    }
    assert!(!text.contains("egpu_command_exit_status"), "{text}");
    assert!(open.contains("# TYPE egpu_build info\n"), "{open}");
}

/// A bucket's line as OpenMetrics text writes it: `le` first, as a float (`le="7.0"`).
fn openmetrics_bucket(line: &str) -> String {
    let Some((series, rest)) = line.split_once(",le=\"") else { return line.to_owned() };
    let Some((le, value)) = rest.split_once("\"}") else { return line.to_owned() };
    let le = if le.contains(['.', 'I']) { le.to_owned() } else { format!("{le}.0") };
    let (name, labels) = series.split_once('{').expect("labels");
    format!("{name}{{le=\"{le}\",{labels}}}{value}")
}
