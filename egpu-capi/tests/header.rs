//! The header drift test: `include/egpu_capi.h` is what cbindgen, run as a library on this
//! crate's sources with `cbindgen.toml`, generates. `EGPU_BLESS=1` writes it.

use std::path::Path;

#[test]
fn the_header_is_what_cbindgen_generates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8");
    let path = dir.join("include/egpu_capi.h");
    if std::env::var("EGPU_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &generated).expect("written");
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        kept == generated,
        "egpu-capi/include/egpu_capi.h differs from what cbindgen generates: run \
         `EGPU_BLESS=1 cargo test -p egpu-capi --test header`"
    );
    // Every exported function of the sources is in it.
    for f in [
        "egpu_last_error",
        "egpu_program_from_bytecode",
        "egpu_vm_run",
        "egpu_map_lookup",
        "egpu_probes_fire",
        "egpu_cuda_attach",
        "egpu_ptx_instrument",
    ] {
        assert!(generated.contains(&format!("{f}(")), "{f} is missing from the header");
    }
}

/// The header compiles as C99, C11 and C++11, and its structs have the sizes and field offsets
/// of the Rust ones (asserted in C, from Rust's `size_of` and `offset_of!`).
#[test]
fn the_header_compiles_as_c_and_cpp_with_the_rust_layouts() {
    use egpu_capi::*;
    use std::mem::offset_of;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checks = [
        (
            "egpu_program_desc",
            size_of::<egpu_program_desc>(),
            "maps",
            offset_of!(egpu_program_desc, maps),
        ),
        (
            "egpu_program_info",
            size_of::<egpu_program_info>(),
            "verified",
            offset_of!(egpu_program_info, verified),
        ),
        (
            "egpu_map_def",
            size_of::<egpu_map_def>(),
            "sm_shards",
            offset_of!(egpu_map_def, sm_shards),
        ),
        (
            "egpu_map_desc",
            size_of::<egpu_map_desc>(),
            "shared_name",
            offset_of!(egpu_map_desc, shared_name),
        ),
        (
            "egpu_map_info",
            size_of::<egpu_map_info>(),
            "shared_name",
            offset_of!(egpu_map_info, shared_name),
        ),
        (
            "egpu_probes_health",
            size_of::<egpu_probes_health>(),
            "rejected",
            offset_of!(egpu_probes_health, rejected),
        ),
        (
            "egpu_device_map",
            size_of::<egpu_device_map>(),
            "live",
            offset_of!(egpu_device_map, live),
        ),
        (
            "egpu_device_probe",
            size_of::<egpu_device_probe>(),
            "map_count",
            offset_of!(egpu_device_probe, map_count),
        ),
        (
            "egpu_ptx_request",
            size_of::<egpu_ptx_request>(),
            "kernel_count",
            offset_of!(egpu_ptx_request, kernel_count),
        ),
        (
            "egpu_ptx_summary",
            size_of::<egpu_ptx_summary>(),
            "unobserved",
            offset_of!(egpu_ptx_summary, unobserved),
        ),
        ("egpu_ptx_site", size_of::<egpu_ptx_site>(), "index", offset_of!(egpu_ptx_site, index)),
    ];
    let mut source = String::from("#include <stddef.h>\n#include \"egpu_capi.h\"\n");
    for (name, size, field, offset) in checks {
        source += &format!(
            "_Static_assert(sizeof({name}) == {size}, \"{name}'s size\");\n\
             _Static_assert(offsetof({name}, {field}) == {offset}, \"{name}.{field}\");\n\
             _Static_assert(offsetof({name}, size) == 0, \"{name}.size first\");\n"
        );
    }
    source += &format!("_Static_assert(EGPU_ABI_VERSION == {EGPU_ABI_VERSION}, \"version\");\n");
    let out = std::env::temp_dir().join(format!("egpu-capi-header-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("a directory");
    let c = out.join("layouts.c");
    std::fs::write(&c, &source).expect("written");
    let cpp = out.join("layouts.cpp");
    std::fs::write(&cpp, source.replace("_Static_assert", "static_assert")).expect("written");
    let include = format!("-I{}", dir.join("include").display());
    for (compiler, std, file) in
        [("cc", "-std=c99", &c), ("cc", "-std=c11", &c), ("c++", "-std=c++11", &cpp)]
    {
        let result = std::process::Command::new(compiler)
            .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", &include])
            .arg(file)
            .output()
            .unwrap_or_else(|e| panic!("`{compiler}` is needed (CI has it): {e}"));
        assert!(
            result.status.success(),
            "{compiler} {std} refused the header:\n{}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
