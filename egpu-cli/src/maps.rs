//! `egpu maps`: the processes whose counts are in shared memory, or what one of them counted,
//! as text or JSON.

use std::fmt::Write as _;

use egpu::host::builtin::{self, Builtin};
use egpu_maps::RawMap;

use crate::Error;
use crate::args::MapsArgs;

/// `egpu maps`.
pub(crate) fn maps_cmd(a: MapsArgs) -> Result<(), Error> {
    let Some(pid) = a.pid else {
        list(a.json);
        return Ok(());
    };
    let maps = Builtin::open(pid).map_err(|e| {
        Error::Failed(format!("process {pid} has no egpu maps in shared memory ({e})"))
    })?;
    loop {
        let user = maps.user_maps();
        if a.json {
            println!("{}", process_json(&maps, &user));
        } else {
            print!("{}", maps.report(None));
            print!("{}", maps.render_maps(&user));
        }
        let Some(every) = a.watch else { return Ok(()) };
        if !builtin::alive(pid) {
            return Ok(());
        }
        std::thread::sleep(every);
        if !a.json {
            println!();
        }
    }
}

/// The processes with counts in shared memory, a line each; with none, says so on standard
/// error.
fn list(json: bool) {
    let removed = builtin::clean_dead();
    if removed > 0 {
        eprintln!("egpu: removed the objects of {removed} processes that no longer exist");
    }
    let pids = builtin::processes();
    if pids.is_empty() {
        eprintln!(
            "egpu: no process has egpu maps in shared memory (`egpu run -- COMMAND` runs one \
             that does)"
        );
    }
    let mut items = Vec::new();
    for pid in pids {
        let opened = Builtin::open(pid);
        let launches = opened.as_ref().map(|b| {
            let report = b.report(None);
            // After the `pid` and `device` lines.
            report.lines().find(|l| l.starts_with("launches ")).unwrap_or_default().to_owned()
        });
        if json {
            items.push(match &launches {
                Ok(line) => {
                    let n = line.strip_prefix("launches ").and_then(|n| n.parse::<u64>().ok());
                    format!("{{\"pid\":{pid},\"launches\":{}}}", n.unwrap_or(0))
                }
                Err(e) => format!("{{\"pid\":{pid},\"error\":{}}}", string(&e.to_string())),
            });
        } else {
            match launches {
                Ok(line) => println!("{pid}: {line}"),
                Err(e) => println!("{pid}: {e}"),
            }
        }
    }
    if json {
        println!("[{}]", items.join(","));
    }
}

/// A JSON string: `s` quoted, with `"`, `\` and the control characters escaped.
pub(crate) fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            // Line and paragraph separators end lines in JavaScript: escaped too.
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A count and a number of bytes: `{"count":N,"bytes":B}`.
fn tally(count: &str, bytes: &str) -> Option<String> {
    let (count, bytes) = (count.parse::<u64>().ok()?, bytes.parse::<u64>().ok()?);
    Some(format!("{{\"count\":{count},\"bytes\":{bytes}}}"))
}

/// One process's counts and maps as a JSON object, from the lines of its report (see
/// `Builtin::report`): `pid`, `launches`, `shapes`, `kernels` (id, launches, name), `devices`
/// (index, UUID and name, each device the process used; empty strings where the driver did not
/// say), `copies`,
/// `allocations` and `frees` by kind, `sets`, `freed`, `syncs` and `modules` by kind, `maps`
/// (each with its kind, key and value sizes, and its entries, or `"shown":false`), and any line
/// this egpu does not know under `other`, so that nothing is lost.
pub(crate) fn process_json(b: &Builtin, user: &[(String, RawMap)]) -> String {
    let mut fields: Vec<String> = Vec::new();
    let mut kernels = Vec::new();
    let mut other = Vec::new();
    // Keyed groups, in the order of the report: (field, members).
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    let mut group =
        |field: &'static str, member: String| match groups.iter_mut().find(|(f, _)| *f == field) {
            Some((_, members)) => members.push(member),
            None => groups.push((field, vec![member])),
        };
    for line in b.report(None).lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let known = match words.as_slice() {
            ["pid" | "launches" | "freed", n] if n.parse::<u64>().is_ok() => {
                fields.push(format!("\"{}\":{n}", words[0]));
                true
            }
            ["shapes", "blocks", blocks, "threads", threads]
                if blocks.parse::<u64>().is_ok() && threads.parse::<u64>().is_ok() =>
            {
                fields.push(format!("\"shapes\":{{\"blocks\":{blocks},\"threads\":{threads}}}"));
                true
            }
            ["kernel", id, n, ..] if n.parse::<u64>().is_ok() => {
                let name = line.splitn(4, ' ').nth(3).unwrap_or_default();
                kernels.push(format!(
                    "{{\"id\":{},\"launches\":{n},\"name\":{}}}",
                    string(id),
                    string(name)
                ));
                true
            }
            ["sets", count, bytes] => {
                tally(count, bytes).map(|t| fields.push(format!("\"sets\":{t}"))).is_some()
            }
            [field @ ("copies" | "allocations" | "frees" | "modules"), kind, count, bytes] => {
                let field: &'static str = match *field {
                    "copies" => "copies",
                    "allocations" => "allocations",
                    "frees" => "frees",
                    _ => "modules",
                };
                tally(count, bytes).map(|t| group(field, format!("{}:{t}", string(kind)))).is_some()
            }
            // The devices and their counts, from the maps below.
            ["device" | "per_device", index, ..] if index.parse::<u32>().is_ok() => true,
            ["syncs", kind, n] if n.parse::<u64>().is_ok() => {
                group("syncs", format!("{}:{n}", string(kind)));
                true
            }
            _ => false,
        };
        if !known {
            other.push(string(line));
        }
    }
    let mut json = format!("{{{}", fields.join(","));
    let _ = write!(json, ",\"kernels\":[{}]", kernels.join(","));
    let _ = write!(json, ",\"devices\":[{}]", devices_json(b).join(","));
    for (field, members) in groups {
        let _ = write!(json, ",\"{field}\":{{{}}}", members.join(","));
    }
    let maps: Vec<String> = user.iter().map(|(name, raw)| map_json(b, name, raw)).collect();
    let _ = write!(json, ",\"maps\":[{}]", maps.join(","));
    if !other.is_empty() {
        let _ = write!(json, ",\"other\":[{}]", other.join(","));
    }
    json.push('}');
    json
}

/// The devices a process used, each as a JSON object: its index, UUID and name (empty strings
/// where the driver did not say), and what the built-in probes counted on it (`copies`, `sets`
/// and `allocations` as counts and bytes; `launches` as kernel launches, their blocks and
/// their blocks' threads summed; `graph_launches`), in index order.
fn devices_json(b: &Builtin) -> Vec<String> {
    let labels = b.devices();
    let counts = b.device_counts();
    let mut indices: Vec<u32> =
        labels.iter().map(|d| d.index).chain(counts.iter().map(|c| c.index)).collect();
    indices.sort_unstable();
    indices.dedup();
    indices
        .into_iter()
        .map(|index| {
            let label = labels.iter().find(|d| d.index == index);
            let (uuid, name) =
                label.map_or((String::new(), String::new()), |d| (d.uuid.clone(), d.name.clone()));
            let c = counts.iter().find(|c| c.index == index).copied().unwrap_or_default();
            let pair =
                |(count, bytes): (u64, u64)| format!("{{\"count\":{count},\"bytes\":{bytes}}}");
            let (launches, blocks, threads) = c.launches;
            format!(
                "{{\"index\":{index},\"uuid\":{},\"name\":{},\"copies\":{},\"sets\":{},\
                 \"allocations\":{},\"launches\":{{\"count\":{launches},\"blocks\":{blocks},\
                 \"threads\":{threads}}},\"graph_launches\":{}}}",
                string(&uuid),
                string(&name),
                pair(c.copies),
                pair(c.sets),
                pair(c.allocations),
                c.graph_launches
            )
        })
        .collect()
}

/// One user map as a JSON object, from `Builtin::render_maps`'s lines for it alone: each
/// `map NAME KEY VALUE` an entry (the key a string: a number, or a kernel's name), a ring's
/// records pending and dropped, a map of a shape not shown `"shown":false`, how long ago its
/// device part was merged, and, for a map on two devices or more, each device's own entries
/// (`map NAME device D KEY VALUE` lines) as `"devices":[{"device":D,"entries":[…]}]`.
fn map_json(b: &Builtin, name: &str, raw: &RawMap) -> String {
    let g = raw.geometry();
    let mut json = format!(
        "{{\"name\":{},\"kind\":{},\"key_size\":{},\"value_size\":{}",
        string(name),
        string(g.kind.name()),
        g.key_size,
        g.value_size
    );
    let text = b.render_maps(&[(name.to_owned(), raw.clone())]);
    let prefix = format!("map {name} ");
    let (mut entries, mut other) = (Vec::new(), Vec::new());
    let mut devices: Vec<(u32, Vec<String>)> = Vec::new();
    let mut shown = true;
    for line in text.lines() {
        // `map NAME device D KEY VALUE`: device D's own entry.
        let on_device = line.strip_prefix(&prefix).and_then(|rest| {
            match rest.split(' ').collect::<Vec<_>>().as_slice() {
                ["device", d, key, value] if value.parse::<u64>().is_ok() => {
                    Some((d.parse::<u32>().ok()?, key.to_string(), value.to_string()))
                }
                _ => None,
            }
        });
        if let Some((device, key, value)) = on_device {
            let entry = format!("{{\"key\":{},\"value\":{value}}}", string(&key));
            match devices.iter_mut().find(|(d, _)| *d == device) {
                Some((_, e)) => e.push(entry),
                None => devices.push((device, vec![entry])),
            }
            continue;
        }
        let merged = line
            .strip_prefix(&format!("device part of {name} merged "))
            .and_then(|rest| rest.strip_suffix(" ms ago"))
            .and_then(|ms| ms.parse::<f64>().ok());
        // `ring NAME records of N B: pending P dropped D`
        let ring = line
            .strip_prefix(&format!("ring {name} records of "))
            .and_then(|rest| rest.split_once(": pending "))
            .and_then(|(_, rest)| rest.split_once(" dropped "))
            .filter(|(p, d)| p.parse::<u64>().is_ok() && d.parse::<u64>().is_ok());
        if let Some(ms) = merged {
            let _ = write!(json, ",\"device_merged_ms_ago\":{ms}");
        } else if let Some((pending, dropped)) = ring {
            let _ = write!(json, ",\"pending\":{pending},\"dropped\":{dropped}");
        } else if line.ends_with(": not shown)") {
            shown = false;
        } else if let Some((key, value)) = line
            .strip_prefix(&prefix)
            .and_then(|rest| rest.rsplit_once(' '))
            .filter(|(_, v)| v.parse::<u64>().is_ok())
        {
            entries.push(format!("{{\"key\":{},\"value\":{value}}}", string(key)));
        } else {
            other.push(string(line));
        }
    }
    if shown {
        let _ = write!(json, ",\"entries\":[{}]", entries.join(","));
    } else {
        json.push_str(",\"shown\":false");
    }
    if !devices.is_empty() {
        let each: Vec<String> = devices
            .iter()
            .map(|(d, e)| format!("{{\"device\":{d},\"entries\":[{}]}}", e.join(",")))
            .collect();
        let _ = write!(json, ",\"devices\":[{}]", each.join(","));
    }
    if !other.is_empty() {
        let _ = write!(json, ",\"other\":[{}]", other.join(","));
    }
    json.push('}');
    json
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 11 of issue 18: `egpu maps --json` escapes what it quotes.
    #[test]
    fn item11_json_strings_are_escaped() {
        assert_eq!(string("plain"), "\"plain\"");
        assert_eq!(string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(string("line\nnext\ttab\r"), "\"line\\nnext\\ttab\\r\"");
        assert_eq!(string("\u{0}\u{1f}\u{7f}"), "\"\\u0000\\u001f\\u007f\"");
        assert_eq!(string("\u{2028}é"), "\"\\u2028é\"");
    }

    /// Issue 29: a map whose device parts are on two devices has each device's own entries
    /// after its own, in the text and under `devices` in the JSON; a map on one device does not.
    #[test]
    fn a_map_on_two_devices_shows_each_device_s_values() {
        use egpu_maps::{Array, Placement};
        let pid = std::process::id();
        let b = Builtin::create(pid, false).expect("the maps");
        let merged = Array::<u64>::create(4, Placement::Process).expect("a map");
        merged.set(0, &40_000).expect("set");
        let own = |device: u32, map: &str, value: u64| {
            let name = builtin::device_map_name(pid, device, map);
            let a = Array::<u64>::create(4, Placement::Shared(name.into())).expect("a map");
            a.set(0, &value).expect("set");
            a
        };
        let _kept = [own(0, "TWO_DEVICES", 20_000), own(1, "TWO_DEVICES", 20_000)];
        let _one = own(0, "ONE_DEVICE", 5);
        let user = [
            ("TWO_DEVICES".to_string(), merged.raw().clone()),
            ("ONE_DEVICE".to_string(), merged.raw().clone()),
        ];
        let text = b.render_maps(&user);
        let two = "map TWO_DEVICES 0 40000\nmap TWO_DEVICES device 0 0 20000\n\
                   map TWO_DEVICES device 1 0 20000\n";
        assert!(text.contains(two), "{text}");
        assert!(!text.contains("map ONE_DEVICE device"), "{text}");
        let json = process_json(&b, &user);
        let devices = "\"entries\":[{\"key\":\"0\",\"value\":40000}],\"devices\":[\
                       {\"device\":0,\"entries\":[{\"key\":\"0\",\"value\":20000}]},\
                       {\"device\":1,\"entries\":[{\"key\":\"0\",\"value\":20000}]}]}";
        assert!(json.contains(devices), "{json}");
        assert!(!json.contains("\"other\""), "{json}");
    }

    /// Issue 29: the devices a process used, each with its UUID and name, as a list, and their
    /// report lines known (no `other`).
    #[test]
    fn the_devices_used_are_listed_with_their_labels() {
        let b = Builtin::create(std::process::id(), false).expect("the maps");
        assert!(process_json(&b, &[]).contains(",\"devices\":[],"));
        let uuid: [u8; 16] = *b"egpu-stand-in-\x00\x01";
        assert!(b.record_device(1, Some(uuid), "Stand-in GPU 1"));
        assert!(b.record_device(0, None, ""));
        let json = process_json(&b, &[]);
        let none = "\"copies\":{\"count\":0,\"bytes\":0},\"sets\":{\"count\":0,\"bytes\":0},\
                    \"allocations\":{\"count\":0,\"bytes\":0},\
                    \"launches\":{\"count\":0,\"blocks\":0,\"threads\":0},\"graph_launches\":0";
        let devices = format!(
            ",\"devices\":[{{\"index\":0,\"uuid\":\"\",\"name\":\"\",{none}}},{{\"index\":1,\
             \"uuid\":\"GPU-65677075-2d73-7461-6e64-2d696e2d0001\",\"name\":\"Stand-in GPU 1\",{none}}}]"
        );
        assert!(json.contains(&devices), "{json}");
        assert!(!json.contains("\"other\""), "{json}");
    }
}
