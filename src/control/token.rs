//! The per-install control token: 256 random bits, hex, created on first start in the data
//! directory as `control-token` (0600 on Unix). The HTTP control API requires it as
//! `Authorization: Bearer <token>` and compares it in constant time. It is never served nor
//! printed: `keyhaven dashboard` reads the file to ask the engine for a one-time dashboard link,
//! and scripts read the file themselves.

use std::io::Write;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::control::ControlError;

/// The file name in the data directory.
pub const TOKEN_FILE: &str = "control-token";

/// The control token. `Debug` does not show it.
#[derive(Clone)]
pub struct ControlToken {
    value: SecretString,
}

impl std::fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlToken([REDACTED])")
    }
}

fn valid(s: &str) -> bool {
    s.len() >= 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl ControlToken {
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(TOKEN_FILE)
    }

    /// Reads the token, or creates it (0600) when the file is missing or malformed. Blocking.
    pub fn load_or_create(data_dir: &Path) -> Result<ControlToken, ControlError> {
        let path = ControlToken::path(data_dir);
        let io = |e: std::io::Error| ControlError::Io(format!("control token {}: {e}", path.display()));
        match std::fs::read_to_string(&path) {
            Ok(s) if valid(s.trim()) => return Ok(ControlToken { value: SecretString::from(s.trim().to_owned()) }),
            Ok(_) => tracing::warn!(path = %path.display(), "the control token file is malformed; making a new one"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        std::fs::create_dir_all(data_dir).map_err(io)?;
        let value = hex::encode(rand::random::<[u8; 32]>());
        let tmp = data_dir.join(format!(".{TOKEN_FILE}.{:08x}.tmp", rand::random::<u32>()));
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let written = (|| {
            let mut f = opts.open(&tmp)?;
            f.write_all(value.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(e));
        }
        Ok(ControlToken { value: SecretString::from(value) })
    }

    /// A token from a known value (tests, the shell).
    pub fn from_value(value: &str) -> ControlToken {
        ControlToken { value: SecretString::from(value.to_owned()) }
    }

    /// Constant-time comparison with a presented token.
    pub fn verify(&self, presented: &str) -> bool {
        let want = self.value.expose_secret().as_bytes();
        let got = presented.as_bytes();
        want.len() == got.len() && bool::from(want.ct_eq(got))
    }

    /// The token itself, for `keyhaven dashboard`'s request to the engine (and tests).
    pub fn expose(&self) -> &str {
        self.value.expose_secret()
    }
}
