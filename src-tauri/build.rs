//! tauri-build with the config at the repository root (`../tauri.conf.json`); capabilities stay
//! in `src-tauri/capabilities/`, generated schemas in `src-tauri/gen/` (gitignored).

fn main() {
    tauri_build::try_build(tauri_build::Attributes::new().config_path("../tauri.conf.json"))
        .unwrap_or_else(|e| panic!("tauri-build failed: {e:#}"));
}
