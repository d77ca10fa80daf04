//! File I/O for setup: reading a client's config, the atomic replace (temp file in the same
//! directory, fsync, rename, fsync of the directory), the concurrent-edit check that runs right
//! before the rename, and timestamped backups.
//!
//! Invariant: a failed write leaves the target as it was and no temp file behind.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::setup::SetupError;

/// SHA-256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The hash recorded for "no file": distinct from the hash of an empty file.
pub(crate) fn content_hash(bytes: Option<&[u8]>) -> String {
    bytes.map_or_else(|| "absent".to_owned(), sha256_hex)
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> SetupError + 'a {
    move |source| SetupError::Io { path: path.to_path_buf(), op, source }
}

/// Follows a symlinked config file (dotfile managers) so the edit lands in the real file instead of
/// replacing the link with a regular file. A dangling or absent path is returned as is.
pub(crate) fn resolve(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// The file's bytes, or `None` if it does not exist.
pub(crate) fn read(path: &Path) -> Result<Option<Vec<u8>>, SetupError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SetupError::Io { path: path.to_path_buf(), op: "read", source: e }),
    }
}

/// Refuses a file the user made read-only. Checked explicitly, not left to the OS, so the
/// answer is the same for root (who may write anyway) and for everyone else: a read-only
/// config is a statement that tools should keep out.
pub(crate) fn check_writable(path: &Path) -> Result<(), SetupError> {
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(SetupError::Io {
            path: path.to_path_buf(),
            op: "open",
            source: std::io::Error::other("is a directory, not a file"),
        }),
        Ok(m) if m.permissions().readonly() => Err(SetupError::ReadOnly { path: path.to_path_buf() }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SetupError::Io { path: path.to_path_buf(), op: "stat", source: e }),
    }
}

/// Permissions for a file Keyhaven creates: owner-only, since client configs can carry a token.
fn new_file_permissions(existing: Option<Permissions>) -> Option<Permissions> {
    if existing.is_some() {
        return existing;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(Permissions::from_mode(0o600))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let nonce: u64 = rand::random();
    path.with_file_name(format!(".{name}.keyhaven-tmp-{}-{nonce:016x}", std::process::id()))
}

fn sync_dir(dir: &Path) {
    // Directory fsync makes the rename durable on Unix; other platforms cannot open a directory
    // this way, and the rename is still atomic there.
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Writes `bytes` to a new file `tmp` with `perms`, fsynced.
fn write_new(tmp: &Path, bytes: &[u8], perms: Option<&Permissions>) -> std::io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    if let Some(p) = perms {
        f.set_permissions(p.clone())?;
    }
    f.write_all(bytes)?;
    f.sync_all()
}

/// Creates the parent directories of `path` if missing.
pub(crate) fn ensure_parent(path: &Path) -> Result<(), SetupError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => fs::create_dir_all(dir).map_err(io_err(dir, "create directory")),
        _ => Ok(()),
    }
}

/// Replaces `path` with `new` (or removes it when `new` is `None`) if and only if its content still
/// hashes to `expected` (see [`content_hash`]). The check runs immediately before the rename, so
/// an edit made by the user or the client since Keyhaven read the file aborts the change.
/// The file's permissions are kept.
pub(crate) fn commit(path: &Path, expected: &str, new: Option<&[u8]>) -> Result<(), SetupError> {
    check_writable(path)?;
    ensure_parent(path)?;
    let current = read(path)?;
    if content_hash(current.as_deref()) != expected {
        return Err(SetupError::ConcurrentEdit { path: path.to_path_buf() });
    }
    let Some(bytes) = new else {
        if current.is_some() {
            fs::remove_file(path).map_err(io_err(path, "remove"))?;
            if let Some(dir) = path.parent() {
                sync_dir(dir);
            }
        }
        return Ok(());
    };
    let perms = fs::metadata(path).ok().map(|m| m.permissions());
    let perms = new_file_permissions(perms);
    let tmp = temp_path(path);
    let written = write_new(&tmp, bytes, perms.as_ref()).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(SetupError::Io { path: path.to_path_buf(), op: "write", source: e });
    }
    if let Some(dir) = path.parent() {
        sync_dir(dir);
    }
    Ok(())
}

/// Writes a file Keyhaven owns (state, token registry): atomic, owner-only, no concurrency check.
pub(crate) fn write_owned(path: &Path, bytes: &[u8]) -> Result<(), SetupError> {
    ensure_parent(path)?;
    let tmp = temp_path(path);
    let written = write_new(&tmp, bytes, new_file_permissions(None).as_ref()).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(SetupError::Io { path: path.to_path_buf(), op: "write", source: e });
    }
    if let Some(dir) = path.parent() {
        sync_dir(dir);
    }
    Ok(())
}

/// Copies `bytes` (the original content of `path`) to `<name>.keyhaven-backup-<stamp>` beside it,
/// with the original's permissions. Never overwrites: a taken name gets a numeric suffix.
pub(crate) fn backup(path: &Path, bytes: &[u8], stamp: &str) -> Result<PathBuf, SetupError> {
    let name = path.file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let perms = fs::metadata(path).ok().map(|m| m.permissions());
    for n in 0..1000u32 {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let candidate = path.with_file_name(format!("{name}.keyhaven-backup-{stamp}{suffix}"));
        match write_new(&candidate, bytes, perms.as_ref()) {
            Ok(()) => {
                if let Some(dir) = path.parent() {
                    sync_dir(dir);
                }
                return Ok(candidate);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => {
                let _ = fs::remove_file(&candidate);
                return Err(SetupError::Io { path: candidate, op: "write backup", source: e });
            }
        }
    }
    Err(SetupError::Io {
        path: path.to_path_buf(),
        op: "write backup",
        source: std::io::Error::other("too many backups with the same timestamp"),
    })
}

/// Removes a file, ignoring one that is already gone.
pub(crate) fn remove_quietly(path: &Path) {
    let _ = fs::remove_file(path);
}
