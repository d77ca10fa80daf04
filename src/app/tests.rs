//! `app::host`: the start-up steps both binaries share, with a hand-built [`Host`].

use std::path::PathBuf;

use crate::app::host::{Host, HostError, load_config};

fn host(root: &std::path::Path) -> Host {
    Host {
        home: Some(root.join("home")),
        config_dir: Some(root.join("cfg")),
        data_dir: Some(root.join("data")),
        appdata: None,
        temp_dir: root.join("tmp"),
        cwd: root.to_path_buf(),
        local_offset_s: None,
    }
}

#[test]
fn paths_use_the_overrides_else_the_platform_dirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = host(dir.path());
    let p = h.paths(None, None).expect("paths");
    assert_eq!(p.config, dir.path().join("cfg").join("config.toml"));
    assert_eq!(p.database, dir.path().join("data").join("keyhaven.db"));
    assert_eq!(p.ca_dir, dir.path().join("data").join("ca"));
    let p = h.paths(Some(PathBuf::from("/x/c.toml")), Some(PathBuf::from("/y"))).expect("paths");
    assert_eq!((p.config, p.data), (PathBuf::from("/x/c.toml"), PathBuf::from("/y")));
    assert!(matches!(Host::default().paths(None, None), Err(HostError::NoHome)));
}

#[test]
fn first_run_writes_the_template_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("new").join("config.toml");
    let mut out = Vec::new();
    let file = load_config(&path, &mut out).expect("template loads");
    assert!(file.models.is_empty());
    assert!(!file.setup.restore_on_stop, "restore on stop is off by default");
    assert!(String::from_utf8_lossy(&out).contains("wrote an example"));
    assert_eq!(std::fs::read_to_string(&path).expect("written"), crate::config::TEMPLATE);
    let mut again = Vec::new();
    load_config(&path, &mut again).expect("loads");
    assert!(again.is_empty(), "said only once");
}

#[test]
fn serve_config_fills_the_setup_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = host(dir.path());
    let paths = h.paths(None, None).expect("paths");
    std::fs::create_dir_all(dir.path().join("cfg")).expect("cfg");
    std::fs::write(&paths.config, "[server]\nlisten = \"0.0.0.0:5000\"\nallow_remote = true\nrequire_client_token = true\n\n[setup]\nrestore_on_stop = true\n")
        .expect("config");
    let (config, extras) = h.serve_config(&paths, None, &mut Vec::new()).expect("serve config");
    assert!(config.file.setup.restore_on_stop);
    assert_eq!(config.config_path.as_deref(), Some(paths.config.as_path()));
    let setup = extras.setup.expect("setup env");
    assert_eq!(setup.gateway_url, "http://127.0.0.1:5000", "an unspecified address is reached on loopback");
    assert_eq!(setup.home, dir.path().join("home"));
    assert!(extras.trust.is_some());
    assert!(Host { home: None, ..h }.setup_env(&paths, None, "http://127.0.0.1:4938").is_none());
}
