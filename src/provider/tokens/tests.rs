//! Estimator pieces: image headers, Anthropic's image formula, and that system prompt, tools and
//! images all count.

use base64::Engine as _;
use serde_json::json;

use crate::model::{ImageSource, Message, Part, Request, Role, ToolDef};
use crate::provider::tokens::{
    CLAUDE_TOOLS_AUTO, Family, IMAGE_FALLBACK, anthropic_image_tokens, estimate, image_size, image_tokens, text_tokens,
};

fn png_header(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    b.extend(w.to_be_bytes());
    b.extend(h.to_be_bytes());
    b.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
    b
}

fn jpeg_header(w: u16, h: u16) -> Vec<u8> {
    let mut b = vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10];
    b.extend(b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00");
    b.extend([0xff, 0xc0, 0x00, 0x11, 0x08]);
    b.extend(h.to_be_bytes());
    b.extend(w.to_be_bytes());
    b.extend([0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01, 0xff, 0xd9]);
    b
}

#[test]
fn image_sizes_come_from_png_and_jpeg_headers() {
    assert_eq!(image_size(&png_header(640, 480)), Some((640, 480)));
    assert_eq!(image_size(&jpeg_header(1024, 768)), Some((1024, 768)));
    assert_eq!(image_size(b"GIF89a\x10\x00\x20\x00"), Some((16, 32)));
    assert_eq!(image_size(b"not an image"), None);
}

#[test]
fn anthropic_formula_with_downscale() {
    assert_eq!(anthropic_image_tokens(750, 1), 1);
    assert_eq!(anthropic_image_tokens(1000, 1000), 1334);
    // 3136x3136 scales to 1568x1568.
    assert_eq!(anthropic_image_tokens(3136, 3136), (1568u64 * 1568).div_ceil(750));
    let data = base64::engine::general_purpose::STANDARD.encode(png_header(300, 200));
    assert_eq!(image_tokens(&ImageSource::Base64 { media_type: "image/png".into(), data }), 80);
    assert_eq!(image_tokens(&ImageSource::Url { url: "https://x/y.png".into() }), IMAGE_FALLBACK);
    let junk = ImageSource::Base64 { media_type: "image/png".into(), data: "!!!!".into() };
    assert_eq!(image_tokens(&junk), IMAGE_FALLBACK);
}

#[test]
fn system_tools_and_images_all_count() {
    let user = Message::text(Role::User, "Hello there");
    let base = Request { messages: vec![user.clone()], ..Request::default() };
    let plain = estimate(&base, Family::Openai);
    assert_eq!(plain, 3 + 3 + 1 + text_tokens("Hello there"));

    let mut with_system = base.clone();
    with_system.messages.insert(0, Message::text(Role::System, "You are a careful assistant who answers briefly."));
    assert!(estimate(&with_system, Family::Openai) > plain + 8);

    let mut with_tools = base.clone();
    with_tools.tools.push(ToolDef {
        name: "get_weather".into(),
        description: Some("Get the current weather in a given location".into()),
        parameters: json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
        cache: None,
    });
    let tools = estimate(&with_tools, Family::Openai);
    assert!(tools > plain + 20, "{tools} vs {plain}");
    assert!(estimate(&with_tools, Family::Claude) >= CLAUDE_TOOLS_AUTO + tools);

    let mut with_image = base.clone();
    with_image.messages[0]
        .content
        .push(Part::Image { source: ImageSource::Url { url: "https://x".into() }, cache: None });
    assert_eq!(estimate(&with_image, Family::Openai), plain + IMAGE_FALLBACK);
}

#[test]
fn the_models_own_tokenizer_is_known_for_o200k_models_only() {
    use crate::provider::tokens::model_tokenizer;
    for own in ["gpt-4o-mini", "gpt-4.1", "GPT-5-mini", "o3", "o4-mini", "openai/gpt-5", "gpt-oss-120b"] {
        assert_eq!(model_tokenizer(false, own), (Family::Openai, true), "{own}");
    }
    for approx in ["gpt-4", "gpt-3.5-turbo", "deepseek-chat", "qwen3-coder", "o1x", "gpt-4oish"] {
        assert_eq!(model_tokenizer(false, approx), (Family::Openai, false), "{approx}");
    }
    assert_eq!(model_tokenizer(false, "anthropic/claude-sonnet-4-5"), (Family::Claude, false));
    assert_eq!(model_tokenizer(true, "some-proxy-name"), (Family::Claude, false));
}

#[test]
fn output_tokens_count_text_thinking_and_tool_calls() {
    use crate::provider::tokens::output_tokens;
    // o200k_base: "Hello" and " world" are one token each.
    let text = [Part::text("Hello world")];
    assert_eq!(output_tokens(&text, Family::Openai), 2);
    assert_eq!(output_tokens(&text, Family::Claude), 3, "2 × 1.2, rounded up");
    let thinking = [Part::Thinking { text: "Hello world".into(), signature: None }];
    assert_eq!(output_tokens(&thinking, Family::Openai), 2);
    let tool = [Part::ToolUse { id: "c".into(), name: "get_weather".into(), input: json!({"city": "Paris"}) }];
    let want = text_tokens("get_weather") + text_tokens(r#"{"city":"Paris"}"#);
    assert_eq!(output_tokens(&tool, Family::Openai), want);
    assert!(want > 3);
    assert_eq!(output_tokens(&[], Family::Openai), 0);
}
