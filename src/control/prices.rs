//! The price table in use and each configured model's effective price: what `keyhaven prices`
//! prints and `GET /api/prices` answers (read-only; a model's price is overridden with
//! `[[models]] price` in the config). History is never re-priced: every call row keeps the cost
//! and the `price_version` it was recorded with.

use crate::config::{FileConfig, ProviderKind};
use crate::control::dto;
use crate::control::export::usd;
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
                note: (m.price.is_none() && lingma)
                    .then(|| "Lingma's models come with the assistant: no table price".to_owned()),
            }
        })
        .collect();
    Ok(dto::PriceReport { version: table.version().to_owned(), currency: table.currency().to_owned(), models })
}
