//! The configured providers and models, and name resolution (display name, alias or stable id).

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::config::PriceOverride;
use crate::config::{
    CursorRoute, CursorTabConfig, FileConfig, FimDialect, KeyRef, LingmaOptions, ModelCapabilities, ModelTimeouts,
    ProviderKind, ToolsMode,
};
use crate::pricing::{Price, PriceTable, PricingError, parse_amount};

#[derive(Debug, Clone)]
pub struct ProviderEntry {
    pub name: String,
    pub kind: ProviderKind,
    /// Without a trailing slash, e.g. `https://api.anthropic.com/v1`.
    pub base_url: String,
    pub key: Option<KeyRef>,
    pub reasoning_content: bool,
    pub max_completion_tokens: bool,
    /// The Lingma kind's settings.
    pub lingma: Option<Arc<LingmaOptions>>,
}

#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// Stable id: 16 hex characters of SHA-256 over base URL, upstream id, key name and display name.
    pub id: String,
    pub name: String,
    pub aliases: Vec<String>,
    pub provider: String,
    pub upstream: String,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u32>,
    pub capabilities: ModelCapabilities,
    pub tools: ToolsMode,
    /// The price used for cost: the per-model override, else the shipped table's entry.
    pub price: Option<Price>,
    /// The version recorded with a cost at [`ModelEntry::price`]: the override's, else the table's.
    pub price_version: Option<String>,
    /// Overrides of the global timeouts.
    pub timeouts: ModelTimeouts,
    /// Where Cursor agent runs with this model go in `hybrid` mode.
    pub cursor: CursorRoute,
    /// The fill-in-the-middle dialect of a FIM model (`[[models]] fim`); `None` for chat models.
    pub fim: Option<FimDialect>,
}

/// A resolved model and its provider.
#[derive(Debug, Clone)]
pub struct Route {
    pub model: Arc<ModelEntry>,
    pub provider: Arc<ProviderEntry>,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    models: Vec<Arc<ModelEntry>>,
    by_name: HashMap<String, usize>,
    providers: HashMap<String, Arc<ProviderEntry>>,
    /// Group name → member model indexes, in fallback order.
    groups: HashMap<String, Vec<usize>>,
    price_version: Option<String>,
    /// `[cursor_tab]`: who answers Cursor Tab, and its prompt budgets.
    cursor_tab: Arc<CursorTabConfig>,
}

/// The version of a price override: its own, else `config-` and a digest of its prices (a hand
/// edit of the prices is a new version).
pub fn override_version(o: &crate::config::PriceOverride) -> String {
    if let Some(v) = o.version.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
        return v.to_owned();
    }
    let mut h = Sha256::new();
    for part in [&o.input, &o.output, &o.cache_read, &o.cache_write] {
        h.update(part.as_deref().unwrap_or("-").trim().as_bytes());
        h.update([0]);
    }
    format!("config-{}", hex::encode(&h.finalize()[..4]))
}

/// The stable id of a model entry.
pub fn model_id(base_url: &str, upstream: &str, key_name: &str, display_name: &str) -> String {
    let mut h = Sha256::new();
    for part in [base_url, upstream, key_name, display_name] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..8])
}

impl Catalog {
    /// Builds the catalog from a validated config. Price overrides that do not parse are an error
    /// naming the model.
    pub fn new(config: &FileConfig, prices: &PriceTable) -> Result<Catalog, String> {
        let mut providers = HashMap::new();
        for p in &config.providers {
            let openai = p.is_openai_itself();
            providers.insert(
                p.name().to_owned(),
                Arc::new(ProviderEntry {
                    name: p.name().to_owned(),
                    kind: p.kind,
                    base_url: p.base_url().to_owned(),
                    key: p.key.clone(),
                    reasoning_content: p.reasoning_content.unwrap_or(!openai),
                    max_completion_tokens: p.max_completion_tokens.unwrap_or(openai),
                    lingma: (p.kind == ProviderKind::Lingma).then(|| Arc::new(p.lingma_options())),
                }),
            );
        }
        let mut catalog = Catalog {
            providers,
            price_version: Some(prices.version().to_owned()),
            cursor_tab: Arc::new(config.cursor_tab.clone()),
            ..Catalog::default()
        };
        for m in &config.models {
            let Some(provider) = catalog.providers.get(m.provider.get_ref()) else {
                return Err(format!("model `{}`: unknown provider `{}`", m.name(), m.provider.get_ref()));
            };
            let key_name = provider.key.as_ref().map_or("", KeyRef::name);
            // OpenAI-compatible vendors have their own sections in the price table.
            // Lingma's models come with the IDE assistant: no table price (an override still applies).
            let table_price = [provider.kind.price_vendor(), "deepseek", "kimi", "qwen", "mistral"]
                .iter()
                .filter(|_| provider.kind != ProviderKind::Lingma)
                .find_map(|vendor| prices.lookup(vendor, &m.upstream));
            let price_version = match &m.price {
                Some(o) => Some(override_version(o)),
                None => table_price.map(|_| prices.version().to_owned()),
            };
            let price = match &m.price {
                Some(o) => Some(
                    override_price(table_price.unwrap_or_default(), o)
                        .map_err(|e| format!("model `{}`: price: {e}", m.name()))?,
                ),
                None => table_price,
            };
            let entry = Arc::new(ModelEntry {
                id: model_id(&provider.base_url, &m.upstream, key_name, m.name()),
                name: m.name().to_owned(),
                aliases: m.aliases.clone(),
                provider: provider.name.clone(),
                upstream: m.upstream.clone(),
                context_window: m.context_window,
                max_output_tokens: m.max_output_tokens,
                capabilities: m.capabilities,
                // Lingma has no native tool calls: its tools are always emulated.
                tools: if provider.kind == ProviderKind::Lingma { ToolsMode::Emulated } else { m.tools },
                price,
                price_version,
                timeouts: m.timeouts,
                cursor: m.cursor,
                fim: m.fim_dialect(),
            });
            let idx = catalog.models.len();
            for n in std::iter::once(&entry.name).chain(&entry.aliases).chain(std::iter::once(&entry.id)) {
                catalog.by_name.entry(n.clone()).or_insert(idx);
            }
            catalog.models.push(entry);
        }
        for g in &config.groups {
            let mut members = Vec::new();
            for name in &g.models {
                let Some(&idx) = catalog.by_name.get(name) else {
                    return Err(format!("group `{}`: unknown model `{name}`", g.name()));
                };
                members.push(idx);
            }
            catalog.groups.insert(g.name().to_owned(), members);
        }
        Ok(catalog)
    }

    /// The routes to try for `name`, in order: a group's members, or the one model.
    pub fn candidates(&self, name: &str) -> Vec<Route> {
        match self.groups.get(name) {
            Some(members) => members.iter().filter_map(|i| self.route_of(*i)).collect(),
            None => self.resolve(name).into_iter().collect(),
        }
    }

    /// True when `name` is a group.
    pub fn is_group(&self, name: &str) -> bool {
        self.groups.contains_key(name)
    }

    fn route_of(&self, idx: usize) -> Option<Route> {
        let model = self.models.get(idx)?.clone();
        let provider = self.providers.get(&model.provider)?.clone();
        Some(Route { model, provider })
    }

    /// Provider names, sorted.
    pub fn provider_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.providers.keys().cloned().collect();
        names.sort();
        names
    }

    pub fn resolve(&self, name: &str) -> Option<Route> {
        let model = self.models.get(*self.by_name.get(name)?)?.clone();
        let provider = self.providers.get(&model.provider)?.clone();
        Some(Route { model, provider })
    }

    pub fn models(&self) -> &[Arc<ModelEntry>] {
        &self.models
    }

    pub fn provider(&self, name: &str) -> Option<&Arc<ProviderEntry>> {
        self.providers.get(name)
    }

    pub fn price_version(&self) -> Option<&str> {
        self.price_version.as_deref()
    }

    /// `[cursor_tab]` as configured.
    pub fn cursor_tab(&self) -> &CursorTabConfig {
        &self.cursor_tab
    }

    /// The FIM model that answers Cursor Tab, when `[cursor_tab] model` names one (validated at
    /// load: it exists and is a FIM model).
    pub fn tab_route(&self) -> Option<Route> {
        let name = self.cursor_tab.local_model()?;
        self.resolve(name).filter(|r| r.model.fim.is_some())
    }
}

#[cfg(test)]
mod tests;

/// Replaces the fields an override names; the others keep the shipped table's values.
fn override_price(mut price: Price, o: &PriceOverride) -> Result<Price, PricingError> {
    for (field, value) in [
        (&mut price.input, &o.input),
        (&mut price.output, &o.output),
        (&mut price.cache_read, &o.cache_read),
        (&mut price.cache_write, &o.cache_write),
    ] {
        if let Some(v) = value {
            *field = parse_amount(v)?;
        }
    }
    Ok(price)
}
