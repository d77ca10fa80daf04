//! Prices per model and the cost of a call, in exact integer arithmetic.
//!
//! The built-in table ships with the binary (`prices.toml`, embedded). Amounts are decimal strings
//! parsed by hand into integer micro-USD per million tokens (`"3.00"` is `3_000_000`), so no float
//! ever touches money. [`cost_micros`] turns a [`Usage`] into micro-USD (1_000_000 = $1), rounded
//! half-up.
//!
//! Matching: a table entry names a provider kind and a model pattern, either an exact id or a
//! prefix ending in `*`. [`PriceTable::lookup`] tries the exact id first, then the longest matching
//! prefix, comparing ASCII case-insensitively. Per-model overrides from config are built with
//! [`Price::from_strs`] and take precedence at the caller.

use serde::Deserialize;

use crate::model::Usage;

/// The table embedded in the binary.
const BUILTIN: &str = include_str!("prices.toml");

/// Micro-units in one unit (and tokens in one million tokens).
const MICRO: u64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PricingError {
    /// An amount that is not a plain non-negative decimal with at most 6 fraction digits.
    #[error("invalid price {value:?}: {reason}")]
    BadAmount { value: String, reason: &'static str },
    /// The table is not valid TOML or misses a field.
    #[error("invalid price table: {0}")]
    Syntax(String),
    /// A model pattern with a `*` anywhere but at the end, or an empty one.
    #[error("invalid model pattern {pattern:?} for provider {provider:?}: only a trailing `*` is allowed")]
    BadPattern { provider: String, pattern: String },
    /// Two entries for the same provider and pattern.
    #[error("duplicate price entry for provider {provider:?}, model {pattern:?}")]
    Duplicate { provider: String, pattern: String },
}

impl PricingError {
    pub fn kind(&self) -> &'static str {
        match self {
            PricingError::BadAmount { .. } => "bad_amount",
            PricingError::Syntax(_) => "syntax",
            PricingError::BadPattern { .. } => "bad_pattern",
            PricingError::Duplicate { .. } => "duplicate",
        }
    }
}

/// Prices in micro-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Price {
    /// Uncached input.
    pub input: u64,
    /// Output, reasoning included.
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Price {
    /// Builds a price from decimal strings in currency units per million tokens (e.g. `"3.00"`),
    /// as a config override would carry them.
    pub fn from_strs(input: &str, output: &str, cache_read: &str, cache_write: &str) -> Result<Price, PricingError> {
        Ok(Price {
            input: parse_amount(input)?,
            output: parse_amount(output)?,
            cache_read: parse_amount(cache_read)?,
            cache_write: parse_amount(cache_write)?,
        })
    }
}

/// Parses a non-negative decimal amount (`"3"`, `"0.075"`, `"15.000001"`) into micro-units.
///
/// Accepts ASCII digits with an optional `.` followed by 1 to 6 digits. Rejects signs, exponents,
/// whitespace, empty parts and more than 6 fraction digits.
pub fn parse_amount(text: &str) -> Result<u64, PricingError> {
    let bad = |reason| PricingError::BadAmount { value: text.to_owned(), reason };
    let (int_part, frac_part) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text, None),
    };
    if int_part.is_empty() {
        return Err(bad("missing integer digits"));
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("expected digits with an optional decimal point"));
    }
    let mut micros: u64 = 0;
    for b in int_part.bytes() {
        micros =
            micros.checked_mul(10).and_then(|m| m.checked_add(u64::from(b - b'0'))).ok_or_else(|| bad("too large"))?;
    }
    micros = micros.checked_mul(MICRO).ok_or_else(|| bad("too large"))?;
    if let Some(frac) = frac_part {
        if frac.is_empty() {
            return Err(bad("missing fraction digits after the decimal point"));
        }
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("expected digits with an optional decimal point"));
        }
        if frac.len() > 6 {
            return Err(bad("more than 6 fraction digits"));
        }
        let mut f: u64 = 0;
        for b in frac.bytes() {
            f = f * 10 + u64::from(b - b'0');
        }
        for _ in frac.len()..6 {
            f *= 10;
        }
        micros = micros.checked_add(f).ok_or_else(|| bad("too large"))?;
    }
    Ok(micros)
}

/// The cost of `usage` at `price`, in micro-USD, rounded half-up.
///
/// `input_tokens` is already uncached input (see [`Usage`]); cache reads and writes are priced
/// separately; reasoning tokens are part of `output_tokens` and are not added again. Computed in
/// `u128`; a result beyond `i64::MAX` is clamped to it.
pub fn cost_micros(price: &Price, usage: &Usage) -> i64 {
    let term = |tokens: u64, per_mtok: u64| u128::from(tokens) * u128::from(per_mtok);
    let total = term(usage.input_tokens, price.input)
        .saturating_add(term(usage.output_tokens, price.output))
        .saturating_add(term(usage.cache_read_tokens, price.cache_read))
        .saturating_add(term(usage.cache_write_tokens, price.cache_write));
    let micros = total.saturating_add(u128::from(MICRO / 2)) / u128::from(MICRO);
    i64::try_from(micros).unwrap_or(i64::MAX)
}

#[derive(Debug, Clone)]
struct Entry {
    provider: String,
    /// Lowercased; without the trailing `*` when `prefix`.
    pattern: String,
    prefix: bool,
    price: Price,
}

/// A versioned set of prices.
#[derive(Debug, Clone)]
pub struct PriceTable {
    version: String,
    currency: String,
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    version: String,
    currency: String,
    #[serde(default)]
    price: Vec<RawEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    provider: String,
    model: String,
    input: String,
    output: String,
    cache_read: String,
    cache_write: String,
}

impl PriceTable {
    /// The table shipped with this build.
    pub fn builtin() -> Result<PriceTable, PricingError> {
        PriceTable::parse(BUILTIN)
    }

    /// Parses a table in the format of the built-in `prices.toml`.
    pub fn parse(text: &str) -> Result<PriceTable, PricingError> {
        let raw: RawTable = toml::from_str(text).map_err(|e| PricingError::Syntax(e.to_string()))?;
        let mut entries: Vec<Entry> = Vec::with_capacity(raw.price.len());
        for e in raw.price {
            let bad_pattern = || PricingError::BadPattern { provider: e.provider.clone(), pattern: e.model.clone() };
            let lower = e.model.to_ascii_lowercase();
            let (pattern, prefix) = match lower.strip_suffix('*') {
                Some(p) => (p.to_owned(), true),
                None => (lower.clone(), false),
            };
            if pattern.is_empty() || pattern.contains('*') {
                return Err(bad_pattern());
            }
            let provider = e.provider.to_ascii_lowercase();
            if entries.iter().any(|x| x.provider == provider && x.pattern == pattern && x.prefix == prefix) {
                return Err(PricingError::Duplicate { provider: e.provider, pattern: e.model });
            }
            let price = Price::from_strs(&e.input, &e.output, &e.cache_read, &e.cache_write)?;
            entries.push(Entry { provider, pattern, prefix, price });
        }
        Ok(PriceTable { version: raw.version, currency: raw.currency, entries })
    }

    /// The table's version string (recorded with every cost as `price_version`).
    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn currency(&self) -> &str {
        &self.currency
    }

    /// The price of `model` at a provider of kind `provider_kind`: the exact id first, then the
    /// longest matching prefix pattern. Both compare ASCII case-insensitively.
    pub fn lookup(&self, provider_kind: &str, model: &str) -> Option<Price> {
        let model = model.to_ascii_lowercase();
        let mut best: Option<&Entry> = None;
        for e in self.entries.iter().filter(|e| e.provider.eq_ignore_ascii_case(provider_kind)) {
            if !e.prefix {
                if e.pattern == model {
                    return Some(e.price);
                }
            } else if model.starts_with(&e.pattern) && best.is_none_or(|b| e.pattern.len() > b.pattern.len()) {
                best = Some(e);
            }
        }
        best.map(|e| e.price)
    }
}

#[cfg(test)]
mod tests;
