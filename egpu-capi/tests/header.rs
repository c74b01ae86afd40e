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
