//! Owner-only files and directories. Keyhaven's data directory holds request and response bodies,
//! whole agent transcripts, the control token and (without an OS keyring) key files; its config
//! file names providers and key entries. On Unix every such directory is 0700 and every such file
//! 0600: when Keyhaven creates them, and again at each start when something made them looser (a
//! warning names the path and the mode it had). Modes that are already stricter are left alone.
//!
//! On other platforms these functions create what is missing and change nothing else: the files
//! inherit the ACL of the user's profile directory (README says so).

use std::io;
use std::path::Path;

/// The mode of Keyhaven's directories (owner only).
pub const DIR_MODE: u32 = 0o700;
/// The mode of Keyhaven's files with bodies, transcripts, tokens or keys (owner read/write).
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents (new ones owner-only), then makes `dir` itself
/// owner-only if it is looser.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    create_dirs(dir)?;
    restrict(dir, DIR_MODE).map(drop)
}

/// Creates `dir` and its missing parents, new ones owner-only; an existing `dir` is not changed.
pub fn create_dirs(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir)
}

/// Creates `path` empty and owner-only when it does not exist; otherwise makes it owner-only if it
/// is looser. (SQLite keeps the mode of a file that exists, and gives its `-wal`, `-shm` and
/// `-journal` files the database file's mode.)
pub fn private_file(path: &Path) -> io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, FILE_MODE);
    match opts.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => restrict(path, FILE_MODE).map(drop),
        Err(e) => Err(e),
    }
}

/// Makes `path` (file or directory) no looser than `mode`: permission bits outside `mode` are
/// removed, and a warning names the path and its old mode. A missing path is not an error.
/// Returns the old mode when it changed something.
pub fn restrict(path: &Path, mode: u32) -> io::Result<Option<u32>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // A symlink's own mode means nothing; never chmod through one to somewhere else.
        if meta.file_type().is_symlink() {
            return Ok(None);
        }
        let old = meta.permissions().mode() & 0o7777;
        let new = old & mode;
        if new == old {
            return Ok(None);
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(new))?;
        tracing::warn!(
            path = %path.display(),
            old_mode = %format!("{old:04o}"),
            new_mode = %format!("{new:04o}"),
            "this file or folder was readable by other users; it is now the owner's only"
        );
        Ok(Some(old))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(None)
    }
}

/// The permission bits of `path` (tests and diagnostics); `None` when it is missing or not on Unix.
pub fn mode_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(all(test, unix))]
mod tests;
