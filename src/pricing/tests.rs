//! Unit tests of decimal parsing, table lookup and cost arithmetic.

use crate::model::Usage;
use crate::pricing::{Price, PriceTable, PricingError, cost_micros, parse_amount};

#[test]
fn parses_decimal_amounts_without_floats() {
    assert_eq!(parse_amount("3").expect("3"), 3_000_000);
    assert_eq!(parse_amount("3.0").expect("3.0"), 3_000_000);
    assert_eq!(parse_amount("3.00").expect("3.00"), 3_000_000);
    assert_eq!(parse_amount("0.075").expect("0.075"), 75_000);
    assert_eq!(parse_amount("0.30").expect("0.30"), 300_000);
    assert_eq!(parse_amount("15.000001").expect("15.000001"), 15_000_001);
    assert_eq!(parse_amount("0").expect("0"), 0);
    assert_eq!(parse_amount("120.5").expect("120.5"), 120_500_000);
}

#[test]
fn rejects_bad_amounts() {
    for bad in ["1.2.3", "-1", "abc", "1.1234567", "", ".5", "5.", "+1", " 1", "1e3", "1,5", "99999999999999999999"] {
        let err = parse_amount(bad).expect_err(bad);
        assert_eq!(err.kind(), "bad_amount", "{bad}");
        assert!(err.to_string().contains("invalid price"), "{err}");
    }
}

#[test]
fn price_from_strs_reports_the_bad_field() {
    let p = Price::from_strs("3.00", "15.00", "0.30", "3.75").expect("valid");
    assert_eq!(p, Price { input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 });
    let err = Price::from_strs("3.00", "x", "0.30", "3.75").expect_err("bad output");
    assert_eq!(
        err,
        PricingError::BadAmount { value: "x".into(), reason: "expected digits with an optional decimal point" }
    );
}

const TABLE: &str = r#"
version = "t1"
currency = "USD"

[[price]]
provider = "anthropic"
model = "claude-sonnet-4*"
input = "3"
output = "15"
cache_read = "0.3"
cache_write = "3.75"

[[price]]
provider = "anthropic"
model = "claude-sonnet-4-5*"
input = "4"
output = "16"
cache_read = "0.4"
cache_write = "4"

[[price]]
provider = "anthropic"
model = "claude-sonnet-4-5-exact"
input = "5"
output = "17"
cache_read = "0.5"
cache_write = "5"
"#;

#[test]
fn lookup_prefers_exact_then_longest_prefix() {
    let t = PriceTable::parse(TABLE).expect("table");
    assert_eq!(t.version(), "t1");
    assert_eq!(t.currency(), "USD");
    let price = |m: &str| t.lookup("anthropic", m).map(|p| p.input);
    assert_eq!(price("claude-sonnet-4-5-exact"), Some(5_000_000));
    assert_eq!(price("claude-sonnet-4-5-20250929"), Some(4_000_000));
    assert_eq!(price("claude-sonnet-4-20250514"), Some(3_000_000));
    assert_eq!(price("claude-sonnet-4"), Some(3_000_000));
    assert_eq!(price("Claude-Sonnet-4-5"), Some(4_000_000));
    assert_eq!(price("claude-opus-4"), None);
    assert_eq!(price("claude-sonnet-3"), None);
    assert_eq!(t.lookup("openai", "claude-sonnet-4"), None);
}

#[test]
fn table_rejects_bad_patterns_duplicates_and_amounts() {
    let entry = |model: &str, input: &str| {
        format!(
            "[[price]]\nprovider = \"p\"\nmodel = \"{model}\"\ninput = \"{input}\"\noutput = \"1\"\ncache_read = \"1\"\ncache_write = \"1\"\n"
        )
    };
    let head = "version = \"v\"\ncurrency = \"USD\"\n";
    let parse = |body: String| PriceTable::parse(&format!("{head}{body}"));
    assert_eq!(parse(entry("a*b", "1")).expect_err("glob").kind(), "bad_pattern");
    assert_eq!(parse(entry("*", "1")).expect_err("empty").kind(), "bad_pattern");
    assert_eq!(parse(format!("{}{}", entry("a*", "1"), entry("a*", "2"))).expect_err("dup").kind(), "duplicate");
    assert_eq!(parse(entry("a", "1.0000001")).expect_err("amount").kind(), "bad_amount");
    assert_eq!(PriceTable::parse("version = 1").expect_err("syntax").kind(), "syntax");
    assert!(parse(format!("{}{}", entry("a*", "1"), entry("a", "2"))).is_ok());
}

#[test]
fn cost_is_exact_and_rounded_half_up() {
    let p = Price::from_strs("3.00", "15.00", "0.30", "3.75").expect("price");
    let u = Usage { input_tokens: 1_000_000, ..Default::default() };
    assert_eq!(cost_micros(&p, &u), 3_000_000);
    // 1234 × 0.30 $/Mtok = 370.2 µ$ → 370.
    let u = Usage { cache_read_tokens: 1234, ..Default::default() };
    assert_eq!(cost_micros(&p, &u), 370);
    // 100 × 15 $/Mtok = 1500 µ$; 1 × 0.30 = 0.3 → total 1500.3 → 1500.
    let u = Usage { output_tokens: 100, cache_read_tokens: 1, ..Default::default() };
    assert_eq!(cost_micros(&p, &u), 1500);
    // Half rounds up: 5 × 0.1 $/Mtok = 0.5 µ$ → 1.
    let half = Price::from_strs("0.1", "0", "0", "0").expect("price");
    assert_eq!(cost_micros(&half, &Usage { input_tokens: 5, ..Default::default() }), 1);
    assert_eq!(cost_micros(&half, &Usage { input_tokens: 4, ..Default::default() }), 0);
    // Every field: 1000 in × 3 + 500 out × 15 + 2000 read × 0.3 + 100 write × 3.75
    // = 3000 + 7500 + 600 + 375 = 11475 µ$. Reasoning is inside output and not added again.
    let u = Usage {
        input_tokens: 1000,
        output_tokens: 500,
        cache_read_tokens: 2000,
        cache_write_tokens: 100,
        reasoning_tokens: 400,
    };
    assert_eq!(cost_micros(&p, &u), 11_475);
}

#[test]
fn cost_does_not_overflow() {
    let max = Price { input: u64::MAX, output: u64::MAX, cache_read: u64::MAX, cache_write: u64::MAX };
    let u = Usage {
        input_tokens: u64::MAX,
        output_tokens: u64::MAX,
        cache_read_tokens: u64::MAX,
        cache_write_tokens: u64::MAX,
        reasoning_tokens: u64::MAX,
    };
    assert_eq!(cost_micros(&max, &u), i64::MAX);
    let p = Price::from_strs("3", "15", "0.3", "3.75").expect("price");
    assert_eq!(cost_micros(&p, &u), i64::MAX);
    assert_eq!(cost_micros(&p, &Usage::default()), 0);
}

#[test]
fn builtin_table_parses_and_covers_listed_models() {
    let t = PriceTable::builtin().expect("builtin table");
    assert_eq!(t.version(), "2026-12-01");
    assert_eq!(t.currency(), "USD");
    let listed = [
        ("anthropic", "claude-opus-4-1-20250805"),
        ("anthropic", "claude-opus-4-5"),
        ("anthropic", "claude-sonnet-4-5-20250929"),
        ("anthropic", "claude-sonnet-4-20250514"),
        ("anthropic", "claude-haiku-4-5"),
        ("anthropic", "claude-3-5-haiku-20241022"),
        ("openai", "gpt-4o"),
        ("openai", "gpt-4o-mini"),
        ("openai", "gpt-4.1"),
        ("openai", "gpt-4.1-mini"),
        ("openai", "gpt-4.1-nano"),
        ("openai", "o3"),
        ("openai", "o4-mini"),
        ("openai", "gpt-5"),
        ("openai", "gpt-5-mini"),
        ("deepseek", "deepseek-chat"),
        ("deepseek", "deepseek-reasoner"),
        ("kimi", "kimi-k2-0905-preview"),
        ("qwen", "qwen-max"),
        ("qwen", "qwen-plus"),
        ("qwen", "qwen3-max"),
        ("mistral", "codestral-latest"),
        ("mistral", "codestral-2508"),
    ];
    for (provider, model) in listed {
        let p = t.lookup(provider, model).unwrap_or_else(|| panic!("no price for {provider}/{model}"));
        assert!(p.input > 0 && p.output > 0, "{provider}/{model}: {p:?}");
    }
    let sonnet = t.lookup("anthropic", "claude-sonnet-4-5").expect("sonnet");
    assert_eq!(sonnet, Price { input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 });
    assert_eq!(t.lookup("openai", "gpt-4o-mini").expect("4o-mini").cache_read, 75_000);
    assert_eq!(t.lookup("openai", "gpt-4o").expect("4o").input, 2_500_000);
    assert_eq!(t.lookup("openai", "gpt-5-mini").expect("5-mini").input, 250_000);
    assert_eq!(t.lookup("openai", "o3-mini").expect("o3-mini").input, 1_100_000);
}
