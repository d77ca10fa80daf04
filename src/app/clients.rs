//! The gateway's view of client tokens: an in-memory map from the SHA-256 of each token to its
//! client, loaded from the setup module's registry and the keyring at start and refreshed every
//! few seconds (so `keyhaven setup` in another process takes effect without a restart).

use std::collections::HashMap;
use std::sync::RwLock;

use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};

use crate::api::ClientDirectory;
use crate::setup::{ClientTokens, TOKEN_PREFIX};

pub struct TokenDirectory {
    tokens: ClientTokens,
    by_hash: RwLock<HashMap<[u8; 32], String>>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl TokenDirectory {
    pub fn new(tokens: ClientTokens) -> TokenDirectory {
        TokenDirectory { tokens, by_hash: RwLock::default() }
    }

    /// Reloads the map. Blocking (keyring): call from a blocking context.
    pub fn refresh(&self) {
        let clients = match self.tokens.clients() {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "client token registry not readable");
                return;
            }
        };
        let mut map = HashMap::new();
        for client in clients {
            if let Ok(Some(token)) = self.tokens.get(&client) {
                map.insert(digest(token.expose_secret()), client);
            }
        }
        if let Ok(mut m) = self.by_hash.write() {
            *m = map;
        }
    }
}

impl ClientDirectory for TokenDirectory {
    fn client_for(&self, token: &str) -> Option<String> {
        if !token.starts_with(TOKEN_PREFIX) {
            return None;
        }
        self.by_hash.read().ok()?.get(&digest(token)).cloned()
    }
}
