//! Owner-only modes: new files and directories, looser ones restricted, stricter ones kept.

use std::os::unix::fs::PermissionsExt;

use crate::perms::{create_dirs, mode_of, private_dir, private_file, restrict};

fn chmod(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn new_directories_and_files_are_owner_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("a").join("b");
    private_dir(&dir).expect("dir");
    assert_eq!(mode_of(&dir), Some(0o700));
    assert_eq!(mode_of(&tmp.path().join("a")), Some(0o700), "missing parents are created owner-only too");
    let file = dir.join("f");
    private_file(&file).expect("file");
    assert_eq!(mode_of(&file), Some(0o600));
    assert_eq!(std::fs::metadata(&file).expect("meta").len(), 0);
}

#[test]
fn looser_modes_are_restricted_and_stricter_ones_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("f");
    std::fs::write(&file, b"data").expect("write");
    chmod(&file, 0o644);
    assert_eq!(restrict(&file, 0o600).expect("restrict"), Some(0o644));
    assert_eq!(mode_of(&file), Some(0o600));
    assert_eq!(std::fs::read(&file).expect("read"), b"data", "content untouched");
    chmod(&file, 0o400);
    assert_eq!(restrict(&file, 0o600).expect("restrict"), None);
    assert_eq!(mode_of(&file), Some(0o400));
    chmod(&file, 0o664);
    private_file(&file).expect("existing file");
    assert_eq!(mode_of(&file), Some(0o600));
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).expect("mkdir");
    chmod(&dir, 0o755);
    private_dir(&dir).expect("dir");
    assert_eq!(mode_of(&dir), Some(0o700));
    assert_eq!(restrict(&tmp.path().join("missing"), 0o600).expect("missing"), None);
}

#[test]
fn existing_directories_are_not_changed_by_create_dirs_and_symlinks_are_not_followed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("shared");
    std::fs::create_dir(&dir).expect("mkdir");
    chmod(&dir, 0o755);
    create_dirs(&dir).expect("exists");
    assert_eq!(mode_of(&dir), Some(0o755));
    let target = tmp.path().join("target");
    std::fs::write(&target, b"x").expect("write");
    chmod(&target, 0o644);
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    assert_eq!(restrict(&link, 0o600).expect("link"), None);
    assert_eq!(mode_of(&target), Some(0o644));
}
