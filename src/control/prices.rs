//! The price table in use and each configured model's effective price: what `keyhaven prices`
//! prints and `GET /api/prices` answers; and price overrides (`keyhaven prices set|unset`,
//! `PUT|DELETE /api/prices/{model}`, the Prices page), written as the model's `[[models]] price`
//! in the config file with a version of their own (`override-<UTC time>`), so new calls are priced
//! with it and recorded with that version. History is never re-priced: every call row keeps the
//! cost and the `price_version` it was recorded with.

use std::path::Path;

use toml_edit::{DocumentMut, InlineTable, Item, Value};

use crate::config::{FileConfig, ProviderKind, load_str};
use crate::control::export::usd;
use crate::control::{ControlError, ControlService, dto};
use crate::pricing::{Price, PriceTable};
use crate::provider::Catalog;

fn per_mtok(p: &Price) -> dto::ModelPriceAmounts {
    dto::ModelPriceAmounts {
        input: usd(i64::try_from(p.input).unwrap_or(i64::MAX)),
        output: usd(i64::try_from(p.output).unwrap_or(i64::MAX)),
        cache_read: usd(i64::try_from(p.cache_read).unwrap_or(i64::MAX)),
        cache_write: usd(i64::try_from(p.cache_write).unwrap_or(i64::MAX)),
    }
}

/// The report for `file`'s models under `table` (the catalog the engine builds from them).
pub fn report(file: &FileConfig, table: &PriceTable) -> Result<dto::PriceReport, String> {
    let catalog = Catalog::new(file, table)?;
    let models = catalog
        .models()
        .iter()
        .map(|m| {
            let overridden = file.models.iter().any(|c| c.name() == m.name && c.price.is_some());
            let lingma = catalog.provider(&m.provider).is_some_and(|p| p.kind == ProviderKind::Lingma);
            let source = match (&m.price, overridden) {
                (None, _) => dto::PriceSource::None,
                (Some(_), true) => dto::PriceSource::Config,
                (Some(_), false) => dto::PriceSource::Table,
            };
            dto::ModelPrice {
                name: m.name.clone(),
                provider: m.provider.clone(),
                upstream: m.upstream.clone(),
                source,
                per_mtok: m.price.as_ref().map(per_mtok),
                version: m.price_version.clone(),
                note: (m.price.is_none() && lingma)
                    .then(|| "Lingma's models come with the assistant: no table price".to_owned()),
            }
        })
        .collect();
    Ok(dto::PriceReport { version: table.version().to_owned(), currency: table.currency().to_owned(), models })
}

/// An override's version: `override-` and the UTC time it was set (`override-20261201T211500Z`).
pub fn override_version(now_ms: i64) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(now_ms.div_euclid(1000)).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let stamp = t
        .format(time::macros::format_description!("[year][month][day]T[hour][minute][second]Z"))
        .unwrap_or_else(|_| now_ms.to_string());
    format!("override-{stamp}")
}

/// Sets (`Some`) or removes (`None`) the price override of the configured model `model` in `doc`.
pub(crate) fn write_override(
    doc: &mut DocumentMut,
    file: &FileConfig,
    model: &str,
    input: Option<&dto::PriceOverrideInput>,
    now_ms: i64,
) -> Result<(), ControlError> {
    if !file.models.iter().any(|m| m.name() == model) {
        return Err(ControlError::NotFound(format!("no model named `{model}` in the config file")));
    }
    let table = doc
        .get_mut("models")
        .and_then(Item::as_array_of_tables_mut)
        .and_then(|a| a.iter_mut().find(|t| t.get("name").and_then(Item::as_str) == Some(model)))
        .ok_or_else(|| ControlError::NotFound(format!("no model named `{model}` in the config file")))?;
    let Some(input) = input else {
        table.remove("price");
        return Ok(());
    };
    let amount = |field: &str, v: &str| -> Result<Value, ControlError> {
        let v = v.trim();
        let ok = !v.is_empty()
            && v.chars().all(|c| c.is_ascii_digit() || c == '.')
            && v.chars().filter(|c| *c == '.').count() <= 1;
        if ok {
            Ok(Value::from(v))
        } else {
            Err(ControlError::Invalid(format!("{field}: a price in USD per million tokens, e.g. 3.00 (got `{v}`)")))
        }
    };
    let mut price = InlineTable::new();
    price.insert("input", amount("input", &input.input)?);
    price.insert("output", amount("output", &input.output)?);
    for (key, v) in [("cache_read", &input.cache_read), ("cache_write", &input.cache_write)] {
        if let Some(v) = v.as_deref().filter(|v| !v.trim().is_empty()) {
            price.insert(key, amount(key, v)?);
        }
    }
    price.insert("version", Value::from(override_version(now_ms)));
    table["price"] = Item::Value(Value::InlineTable(price));
    Ok(())
}

/// Sets or removes a model's price override in the config file at `path` (the command line's
/// way when no engine is running; a running engine's control service does the same edit and
/// applies it at once). Nothing is written when the result does not load.
pub fn edit_file(
    path: &Path,
    model: &str,
    input: Option<&dto::PriceOverrideInput>,
    now_ms: i64,
) -> Result<(), ControlError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ControlError::Io(format!("cannot read {name}: {e}")))?;
    let mut doc: DocumentMut =
        text.parse().map_err(|e| ControlError::Invalid(format!("{name} does not parse: {e}")))?;
    let file = load_str(&name, &text).map_err(|e| ControlError::Invalid(e.to_string()))?;
    write_override(&mut doc, &file, model, input, now_ms)?;
    let new_text = doc.to_string();
    let new = load_str(&name, &new_text).map_err(|e| ControlError::Invalid(format!("the change was refused: {e}")))?;
    let table = PriceTable::builtin().map_err(|e| ControlError::Internal(e.to_string()))?;
    Catalog::new(&new, &table).map_err(|e| ControlError::Invalid(format!("the change was refused: {e}")))?;
    crate::control::edit::write_atomic(path, new_text.as_bytes())
}

impl ControlService {
    /// Sets a model's price override; new calls are priced with it (and recorded with its version).
    pub async fn set_price(
        &self,
        model: &str,
        input: dto::PriceOverrideInput,
    ) -> Result<dto::PriceReport, ControlError> {
        let model = model.to_owned();
        let now = crate::clock::now_ms();
        self.change(move |doc, file| write_override(doc, file, &model, Some(&input), now)).await?;
        self.prices().await
    }

    /// Removes a model's price override: new calls use the table's price again.
    pub async fn unset_price(&self, model: &str) -> Result<dto::PriceReport, ControlError> {
        let model = model.to_owned();
        let now = crate::clock::now_ms();
        self.change(move |doc, file| write_override(doc, file, &model, None, now)).await?;
        self.prices().await
    }
}
