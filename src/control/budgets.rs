//! Budgets through control: the report the dashboard and the tray read (`GET /api/budgets`), and
//! `[[budgets]]` edits written to the config file like providers and models, then applied to the
//! gateway's tracker with a fresh seed from the ledger.

use toml_edit::{DocumentMut, Item, Table, Value};

use crate::config::{self, BudgetAction, BudgetPeriod, FileConfig};
use crate::control::{ControlError, ControlService, dto};
use crate::provider::Gateway;
use crate::provider::budget::{self, BudgetState};
use crate::store::Store;

/// The offset budgets follow: the config's `time_zone`, else the system's (`local_offset_s`,
/// passed in by the binary).
pub(crate) fn offset_of(file: &FileConfig, local_offset_s: i32) -> i32 {
    config::parse_time_zone(file.time_zone.as_deref()).ok().flatten().unwrap_or(local_offset_s)
}

/// Configures the gateway's budgets from `file`, seeded with the ledger's spend of each period so
/// far (one grouped read per distinct period start). Called at engine start and after a budget edit.
pub async fn apply(gateway: &Gateway, store: &Store, file: &FileConfig, local_offset_s: i32) {
    let offset = offset_of(file, local_offset_s);
    let now = crate::clock::now_ms();
    let mut starts: Vec<i64> = file.budgets.iter().map(|b| budget::period_bounds(b.period, offset, now).0).collect();
    starts.push(budget::period_bounds(BudgetPeriod::Day, offset, now).0);
    starts.sort_unstable();
    starts.dedup();
    let mut seeds = std::collections::HashMap::new();
    for since in starts.iter().copied() {
        match store.spend_since(since).await {
            Ok(rows) => {
                seeds.insert(since, rows);
            }
            Err(e) => tracing::warn!(error = %e, "budget spend not read from the ledger; counting from zero"),
        }
    }
    // The alerts the ledger holds for the current periods are not raised again.
    let raised = match starts.first() {
        Some(first) => store.budget_alerts_since(*first).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "budget alerts not read from the ledger");
            Vec::new()
        }),
        None => Vec::new(),
    };
    let catalog = gateway.catalog();
    let name_of = |id: &str| catalog.models().iter().find(|m| m.id == id).map(|m| m.name.clone());
    gateway.budgets().configure(
        &file.budgets,
        offset,
        now,
        &mut |since| seeds.remove(&since).unwrap_or_default(),
        &name_of,
        &raised,
    );
}

fn scope_of(s: &BudgetState) -> dto::BudgetScope {
    match s.scope {
        "client" => dto::BudgetScope::Client,
        "provider" => dto::BudgetScope::Provider,
        "model" => dto::BudgetScope::Model,
        _ => dto::BudgetScope::All,
    }
}

fn period_to_dto(p: BudgetPeriod) -> dto::BudgetPeriod {
    match p {
        BudgetPeriod::Day => dto::BudgetPeriod::Day,
        BudgetPeriod::Week => dto::BudgetPeriod::Week,
        BudgetPeriod::Month => dto::BudgetPeriod::Month,
    }
}

fn period_str(p: dto::BudgetPeriod) -> &'static str {
    match p {
        dto::BudgetPeriod::Day => "day",
        dto::BudgetPeriod::Week => "week",
        dto::BudgetPeriod::Month => "month",
    }
}

fn to_dto(s: &BudgetState) -> dto::Budget {
    let level = if s.exceeded() {
        dto::BudgetLevel::Exceeded
    } else if s.warning() {
        dto::BudgetLevel::Warning
    } else {
        dto::BudgetLevel::Ok
    };
    dto::Budget {
        name: s.name.clone(),
        scope: scope_of(s),
        target: s.target.clone(),
        period: period_to_dto(s.period),
        limit_usd: s.limit_micros as f64 / 1e6,
        soft_percent: s.soft_percent,
        on_limit: match s.on_limit {
            BudgetAction::Refuse => dto::BudgetAction::Refuse,
            BudgetAction::Downgrade => dto::BudgetAction::Downgrade,
        },
        downgrade_to: s.downgrade_to.clone(),
        spent_micros: s.used_micros(),
        spent_usd: s.used_micros() as f64 / 1e6,
        in_flight_micros: s.reserved_micros,
        percent: budget::percent(s),
        level,
        period_start_ms: s.period_start_ms,
        reset_ms: s.reset_ms,
    }
}

/// Checks a budget from the UI before it is written (the config validation checks the rest).
fn check(input: &dto::BudgetInput) -> Result<(), ControlError> {
    let name = input.name.trim();
    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(ControlError::Invalid("budget name: 1 to 64 printable characters".into()));
    }
    let target = input.target.as_deref().map(str::trim).filter(|t| !t.is_empty());
    match (input.scope, target) {
        (dto::BudgetScope::All, Some(_)) => Err(ControlError::Invalid("a budget on everything names no target".into())),
        (dto::BudgetScope::All, None) => Ok(()),
        (_, None) => {
            Err(ControlError::Invalid("name the client, provider, or model or group the budget limits".into()))
        }
        (_, Some(_)) => Ok(()),
    }
}

fn write(t: &mut Table, b: &dto::BudgetInput) {
    let keep = |t: &mut Table, key: &str, v: Option<Value>| match v {
        Some(v) => {
            let same =
                t.get(key).and_then(Item::as_value).is_some_and(|o| o.to_string().trim() == v.to_string().trim());
            if !same {
                t[key] = Item::Value(v);
            }
        }
        None => {
            t.remove(key);
        }
    };
    keep(t, "name", Some(Value::from(b.name.trim())));
    let target = b.target.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(Value::from);
    for (key, scope) in [
        ("client", dto::BudgetScope::Client),
        ("provider", dto::BudgetScope::Provider),
        ("model", dto::BudgetScope::Model),
    ] {
        keep(t, key, if b.scope == scope { target.clone() } else { None });
    }
    keep(t, "period", Some(Value::from(period_str(b.period))));
    keep(t, "limit_usd", Some(Value::from(b.limit_usd)));
    keep(t, "soft_percent", b.soft_percent.filter(|p| *p != 80).map(|p| Value::from(i64::from(p))));
    let action = match b.on_limit {
        dto::BudgetAction::Refuse => "refuse",
        dto::BudgetAction::Downgrade => "downgrade",
    };
    keep(t, "on_limit", Some(Value::from(action)));
    let to = b
        .downgrade_to
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty() && b.on_limit == dto::BudgetAction::Downgrade);
    keep(t, "downgrade_to", to.map(Value::from));
}

fn budgets_mut(doc: &mut DocumentMut) -> Result<&mut toml_edit::ArrayOfTables, ControlError> {
    let item = doc.entry("budgets").or_insert_with(|| Item::ArrayOfTables(toml_edit::ArrayOfTables::new()));
    item.as_array_of_tables_mut()
        .ok_or_else(|| ControlError::Invalid("`budgets` in the config file is not an array of tables".into()))
}

fn named<'a>(doc: &'a mut DocumentMut, name: &str) -> Result<&'a mut Table, ControlError> {
    budgets_mut(doc)?
        .iter_mut()
        .find(|t| t.get("name").and_then(Item::as_str) == Some(name))
        .ok_or_else(|| ControlError::NotFound(format!("no budget named `{name}`")))
}

impl ControlService {
    /// Every budget with its spend this period, today's spend, and the nearest budget.
    pub async fn budgets(&self) -> Result<dto::BudgetReport, ControlError> {
        let now = crate::clock::now_ms();
        let tracker = self.inner.gateway.budgets();
        let budgets: Vec<dto::Budget> = tracker.states(now).iter().map(to_dto).collect();
        let nearest = budgets.iter().max_by_key(|b| b.percent).map(|b| b.name.clone());
        let today = tracker.today_micros(now);
        let alerts = tracker
            .alerts()
            .into_iter()
            .map(|a| dto::BudgetAlert {
                on_limit: budgets.iter().find(|b| b.name == a.budget).map(|b| b.on_limit),
                budget: a.budget,
                level: match a.level {
                    crate::model::AlertLevel::Soft => dto::BudgetAlertLevel::Soft,
                    crate::model::AlertLevel::Hard => dto::BudgetAlertLevel::Hard,
                },
                spent_usd: a.spent_micros as f64 / 1e6,
                limit_usd: a.limit_micros as f64 / 1e6,
                percent: a
                    .spent_micros
                    .saturating_mul(100)
                    .checked_div(a.limit_micros)
                    .map_or(100, |p| u32::try_from(p).unwrap_or(u32::MAX)),
                period_start_ms: a.period_start_ms,
                reset_ms: a.reset_ms,
                at_ms: a.at_ms,
            })
            .collect();
        Ok(dto::BudgetReport {
            alerts,
            budgets,
            today_micros: today,
            today_usd: today as f64 / 1e6,
            nearest,
            utc_offset_s: tracker.offset_s(),
            time_zone: self.current().time_zone.unwrap_or_else(|| "local".into()),
        })
    }

    pub async fn create_budget(&self, input: dto::BudgetInput) -> Result<dto::BudgetReport, ControlError> {
        check(&input)?;
        self.change(move |doc, file| {
            if file.budgets.iter().any(|b| b.name() == input.name.trim()) {
                return Err(ControlError::Conflict(format!("a budget named `{}` exists", input.name.trim())));
            }
            let mut t = Table::new();
            write(&mut t, &input);
            budgets_mut(doc)?.push(t);
            Ok(())
        })
        .await?;
        self.reapply_budgets().await
    }

    pub async fn update_budget(&self, name: &str, input: dto::BudgetInput) -> Result<dto::BudgetReport, ControlError> {
        check(&input)?;
        let old = name.to_owned();
        self.change(move |doc, file| {
            if !file.budgets.iter().any(|b| b.name() == old) {
                return Err(ControlError::NotFound(format!("no budget named `{old}`")));
            }
            if old != input.name.trim() && file.budgets.iter().any(|b| b.name() == input.name.trim()) {
                return Err(ControlError::Conflict(format!("a budget named `{}` exists", input.name.trim())));
            }
            write(named(doc, &old)?, &input);
            Ok(())
        })
        .await?;
        self.reapply_budgets().await
    }

    pub async fn delete_budget(&self, name: &str) -> Result<dto::BudgetReport, ControlError> {
        let name = name.to_owned();
        self.change(move |doc, file| {
            if !file.budgets.iter().any(|b| b.name() == name) {
                return Err(ControlError::NotFound(format!("no budget named `{name}`")));
            }
            crate::control::edit::remove_named(doc, "budgets", &name)
        })
        .await?;
        self.reapply_budgets().await
    }

    async fn reapply_budgets(&self) -> Result<dto::BudgetReport, ControlError> {
        let file = self.current();
        apply(&self.inner.gateway, &self.inner.store, &file, self.inner.local_offset_s).await;
        self.budgets().await
    }
}
