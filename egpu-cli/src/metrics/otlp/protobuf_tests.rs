//! The protobuf export request decodes to what was encoded, and its bytes are OTLP's.

use prost::Message as _;

use super::*;
use crate::metrics::fixture::filled;

/// Issue 18, item 9: OTLP as protobuf, decoded back (a round trip through the wire form), with
/// the values the JSON carries.
#[test]
fn item9_otlp_protobuf_round_trip() {
    let b = filled();
    let options = MetricsOptions::default().with_kernel_names(true);
    let sent = message(std::slice::from_ref(&b), options, 1, 2);
    let bytes = request(std::slice::from_ref(&b), options, 1, 2);
    let got = ExportMetricsServiceRequest::decode(bytes.as_slice()).expect("a request");
    assert_eq!(got, sent);
    let resource = &got.resource_metrics[0];
    let attributes = &resource.resource.as_ref().expect("a resource").attributes;
    assert_eq!(attributes[1].key, "process.pid");
    assert_eq!(attributes[1].value, Some(AnyValue { value: Some(Any::IntValue(4242)) }));
    let metrics = &resource.scope_metrics[0].metrics;
    let find = |name: &str| metrics.iter().find(|m| m.name == name).expect(name);
    let calls = find("gpu.cuda.kernel.launch.calls");
    assert_eq!(calls.unit, "{call}");
    let Some(Data::Sum(sum)) = &calls.data else { panic!("a sum: {calls:?}") };
    assert!(sum.is_monotonic && sum.aggregation_temporality == CUMULATIVE);
    let point = &sum.data_points[0];
    assert_eq!(point.attributes, [string("cuda.kernel.name", "_Z1av")]);
    assert_eq!((point.start_time_unix_nano, point.time_unix_nano), (1, 2));
    assert_eq!(point.value, Some(Number::AsInt(3)));
    let grid = find("gpu.cuda.kernel.grid.size");
    let Some(Data::Histogram(h)) = &grid.data else { panic!("a histogram: {grid:?}") };
    let point = &h.data_points[0];
    assert_eq!((point.count, point.sum), (4, Some(1024.0)));
    assert_eq!((point.bucket_counts.len(), point.explicit_bounds.len()), (42, 41));
    assert_eq!(point.bucket_counts.iter().sum::<u64>(), 4);
    assert_eq!(&point.explicit_bounds[..3], [0.0, 1.0, 3.0]);
    let copies = find("gpu.cuda.memory.copies");
    let Some(Data::Histogram(h)) = &copies.data else { panic!("a histogram: {copies:?}") };
    assert!(
        h.data_points.iter().any(|p| p.attributes == [string("cuda.memcpy.kind", "HostToDevice")]
            && p.sum == Some(9096.0))
    );
    // Counted per device (issue 29): a point per device, `gpu.index` its ordinal.
    let graphs = find("gpu.cuda.graph.launch.calls");
    let Some(Data::Sum(sum)) = &graphs.data else { panic!("a sum: {graphs:?}") };
    let points: Vec<_> =
        sum.data_points.iter().map(|p| (p.attributes.clone(), p.value.clone())).collect();
    assert_eq!(points, [(vec![string("gpu.index", "0")], Some(Number::AsInt(1)))]);
}

/// The bytes on the wire are those of OTLP's field numbers and types, checked by hand on small
/// messages (so a wrong tag in the derived structs, which a round trip cannot see, fails here).
#[test]
fn item9_otlp_protobuf_uses_otlps_field_numbers() {
    // KeyValue { key = 1: "a", value = 2: AnyValue { string_value = 1: "b" } }.
    assert_eq!(string("a", "b").encode_to_vec(), [0x0a, 1, b'a', 0x12, 3, 0x0a, 1, b'b']);
    // AnyValue { int_value = 3: 5 }: a varint.
    let int = AnyValue { value: Some(Any::IntValue(5)) };
    assert_eq!(int.encode_to_vec(), [0x18, 5]);
    // NumberDataPoint: start = 2 and time = 3 fixed64, as_int = 6 sfixed64.
    let point = NumberDataPoint {
        attributes: Vec::new(),
        start_time_unix_nano: 1,
        time_unix_nano: 2,
        value: Some(Number::AsInt(3)),
    };
    let mut expected = vec![0x11, 1, 0, 0, 0, 0, 0, 0, 0, 0x19, 2, 0, 0, 0, 0, 0, 0, 0];
    expected.extend([0x31, 3, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(point.encode_to_vec(), expected);
    // Metric { name = 1, sum = 7 { aggregation_temporality = 2, is_monotonic = 3 } }.
    let metric = Metric {
        name: "m".into(),
        description: String::new(),
        unit: String::new(),
        data: Some(Data::Sum(Sum {
            data_points: Vec::new(),
            aggregation_temporality: CUMULATIVE,
            is_monotonic: true,
        })),
    };
    assert_eq!(metric.encode_to_vec(), [0x0a, 1, b'm', 0x3a, 4, 0x10, 2, 0x18, 1]);
    // HistogramDataPoint: count = 4 fixed64, bucket_counts = 6 packed fixed64.
    let h = HistogramDataPoint { count: 1, bucket_counts: vec![1], ..Default::default() };
    let mut expected = vec![0x21, 1, 0, 0, 0, 0, 0, 0, 0];
    expected.extend([0x32, 8, 1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(h.encode_to_vec(), expected);
    // Bad bytes are an error, not a panic.
    assert!(ExportMetricsServiceRequest::decode(&[0x0a, 0xff][..]).is_err());
}
