//! The model catalog calls Cursor makes (`AvailableModels`, `GetUsableModels`,
//! `GetDefaultModel`, `GetDefaultModelForCli`), answered from Keyhaven's configured models, and
//! the way back from a Cursor model selection to a configured model.
//!
//! Each configured model appears once, named by its configured name (which
//! [`crate::provider::Catalog`] resolves) and shown with that name; the first model is the default.
//! Groups are not listed (part 1). No account, plan or entitlement data is involved.

use crate::cursor::protocol::{agent, aiserver};
use crate::provider::{Catalog, ModelEntry};

/// `disable_unused_models_after_n_hours`: large, so the client never disables a local model.
const NEVER_DISABLE_HOURS: i32 = 2_400_000;

fn available(m: &ModelEntry) -> aiserver::AvailableModel {
    aiserver::AvailableModel {
        name: m.name.clone(),
        default_on: true,
        supports_agent: Some(true),
        supports_thinking: Some(m.capabilities.thinking),
        supports_images: Some(m.capabilities.vision),
        supports_max_mode: Some(false),
        supports_non_max_mode: Some(true),
        supports_plan_mode: Some(true),
        supports_cmd_k: Some(false),
        context_token_limit: m.context_window.and_then(|c| i32::try_from(c).ok()),
        client_display_name: Some(m.name.clone()),
        server_model_name: Some(m.name.clone()),
        inputbox_short_model_name: Some(m.name.clone()),
        is_user_added: Some(true),
        id_aliases: m.aliases.clone(),
        vendor_name: Some("Keyhaven".to_owned()),
        tooltip_data: Some(aiserver::TooltipData {
            primary_text: m.name.clone(),
            secondary_text: format!("{} via Keyhaven ({})", m.upstream, m.provider),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn feature(names: &[String]) -> Option<aiserver::FeatureModelConfig> {
    let first = names.first()?;
    Some(aiserver::FeatureModelConfig {
        default_model: first.clone(),
        fallback_models: names.to_vec(),
        best_of_n_default_models: Vec::new(),
    })
}

/// `aiserver.v1.AiService/AvailableModels`.
pub fn available_models(catalog: &Catalog) -> aiserver::AvailableModelsResponse {
    let names: Vec<String> = catalog.models().iter().filter(|m| m.fim.is_none()).map(|m| m.name.clone()).collect();
    aiserver::AvailableModelsResponse {
        model_names: names.clone(),
        models: catalog.models().iter().filter(|m| m.fim.is_none()).map(|m| available(m)).collect(),
        composer_model_config: feature(&names),
        cmd_k_model_config: feature(&names),
        background_composer_model_config: feature(&names),
        plan_execution_model_config: feature(&names),
        spec_model_config: feature(&names),
        deep_search_model_config: feature(&names),
        quick_agent_model_config: feature(&names),
        use_model_parameters: false,
        disable_unused_models_after_n_hours: Some(NEVER_DISABLE_HOURS),
        upgrade_unchanged_models_after_n_hours: None,
        subagent_model_configs: Default::default(),
    }
}

fn details(m: &ModelEntry) -> agent::ModelDetails {
    agent::ModelDetails {
        model_id: m.name.clone(),
        thinking_details: m.capabilities.thinking.then_some(agent::ThinkingDetails {}),
        display_model_id: m.name.clone(),
        display_name: m.name.clone(),
        display_name_short: m.name.clone(),
        aliases: m.aliases.clone(),
        max_mode: Some(false),
        credentials: None,
    }
}

/// `GetUsableModels` (agent.v1 and aiserver.v1 share the wire shape).
pub fn usable_models(catalog: &Catalog) -> agent::GetUsableModelsResponse {
    agent::GetUsableModelsResponse {
        models: catalog.models().iter().filter(|m| m.fim.is_none()).map(|m| details(m)).collect(),
    }
}

/// `GetDefaultModelForCli` (both packages).
pub fn default_model_for_cli(catalog: &Catalog) -> agent::GetDefaultModelForCliResponse {
    agent::GetDefaultModelForCliResponse {
        model: catalog.models().iter().find(|m| m.fim.is_none()).map(|m| details(m)),
    }
}

/// `aiserver.v1.AiService/GetDefaultModel`.
pub fn default_model(catalog: &Catalog) -> aiserver::GetDefaultModelResponse {
    let first = catalog.models().iter().find(|m| m.fim.is_none()).map(|m| m.name.clone()).unwrap_or_default();
    let thinking = catalog
        .models()
        .iter()
        .find(|m| m.fim.is_none() && m.capabilities.thinking)
        .map_or_else(|| first.clone(), |m| m.name.clone());
    aiserver::GetDefaultModelResponse {
        model: first,
        thinking_model: thinking,
        max_mode: false,
        next_default_set_date: String::new(),
    }
}

/// The model a run asked for: `requested_model.model_id`, else `model_details.model_id`.
pub fn requested_model(run: &agent::AgentRunRequest) -> Option<&str> {
    run.requested_model
        .as_ref()
        .map(|r| r.model_id.as_str())
        .filter(|m| !m.is_empty())
        .or_else(|| run.model_details.as_ref().map(|d| d.model_id.as_str()).filter(|m| !m.is_empty()))
}

/// Maps a Cursor model selection back to a configured model name: the name itself (or an alias
/// or stable id), else a variant string `<name>:<effort>` with the suffix dropped. `None` when it
/// names no configured model.
pub fn resolve(catalog: &Catalog, selection: &str) -> Option<String> {
    if let Some(route) = catalog.resolve(selection) {
        return Some(route.model.name.clone());
    }
    let (base, _) = selection.rsplit_once(':')?;
    catalog.resolve(base).map(|r| r.model.name.clone())
}
