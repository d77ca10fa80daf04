//! Catalog tests: stable ids, name resolution, price overrides.

use crate::config::load_str;
use crate::pricing::PriceTable;
use crate::provider::{Catalog, model_id};

const CONFIG: &str = r#"
[[providers]]
name = "ant"
kind = "anthropic"
base_url = "https://api.anthropic.com/v1"
key = "keyring:ant"

[[providers]]
name = "ds"
kind = "openai"
base_url = "https://api.deepseek.com/v1"

[[models]]
name = "sonnet"
aliases = ["claude-sonnet-4-5"]
provider = "ant"
upstream = "claude-sonnet-4-5"
price = { output = "20" }

[[models]]
name = "deepseek"
provider = "ds"
upstream = "deepseek-chat"
"#;

fn catalog() -> Catalog {
    let file = load_str("c.toml", CONFIG).expect("config");
    Catalog::new(&file, &PriceTable::builtin().expect("prices")).expect("catalog")
}

#[test]
fn stable_id_is_16_hex_of_the_four_parts() {
    let id = model_id("https://api.anthropic.com/v1", "claude-sonnet-4-5", "ant", "sonnet");
    assert_eq!(id.len(), 16);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(id, model_id("https://api.anthropic.com/v1", "claude-sonnet-4-5", "ant", "sonnet"));
    assert_ne!(id, model_id("https://api.anthropic.com/v1", "claude-sonnet-4-5", "other-key", "sonnet"));
    assert_eq!(catalog().models()[0].id, id);
}

#[test]
fn resolves_by_name_alias_and_id() {
    let c = catalog();
    let id = c.models()[0].id.clone();
    for name in ["sonnet", "claude-sonnet-4-5", id.as_str()] {
        let route = c.resolve(name).expect("resolves");
        assert_eq!(route.model.name, "sonnet");
        assert_eq!(route.provider.name, "ant");
    }
    assert!(c.resolve("gpt-4o").is_none());
}

#[test]
fn overrides_replace_only_the_named_prices() {
    let c = catalog();
    let table = PriceTable::builtin().expect("prices").lookup("anthropic", "claude-sonnet-4-5").expect("listed");
    let price = c.models()[0].price.expect("priced");
    assert_eq!(price.output, 20_000_000);
    assert_eq!(price.input, table.input);
    assert_eq!(price.cache_read, table.cache_read);
    // OpenAI-compatible vendors are priced from their own table section.
    assert!(c.models()[1].price.is_some(), "deepseek-chat is in the shipped table");
}

#[test]
fn openai_compatible_vendors_get_reasoning_content_and_openai_does_not() {
    let c = catalog();
    assert!(c.provider("ds").expect("ds").reasoning_content);
}
