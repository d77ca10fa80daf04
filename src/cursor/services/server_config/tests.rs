//! `GetServerConfig` adjustment: only `http2_config` changes, every official byte stays.

use prost::Message;

use crate::config::CursorHttp2;
use crate::cursor::protocol::aiserver::{AgentUrlConfig, GetServerConfigResponse, Http2Config};
use crate::cursor::services::server_config::{adjust, forced};

#[test]
fn adjust_sets_http2_config_and_keeps_every_other_byte() {
    let official = GetServerConfigResponse {
        http2_config: Http2Config::ForceAllEnabled as i32,
        agent_url_config: Some(AgentUrlConfig {
            agent_url: "https://agent.api5.cursor.sh".into(),
            agentn_url: "https://agentn.api5.cursor.sh".into(),
        }),
    }
    .encode_to_vec();
    // A field Keyhaven's proto does not know (field 100, a string) survives too.
    let mut with_unknown = official.clone();
    prost::encoding::string::encode(100, &"indexing-key".to_owned(), &mut with_unknown);
    let out = adjust(&with_unknown, Http2Config::ForceBidiDisabled);
    assert_eq!(&out[..with_unknown.len()], &with_unknown[..]);
    let back = GetServerConfigResponse::decode(out.as_slice()).expect("decodes");
    assert_eq!(back.http2_config, Http2Config::ForceBidiDisabled as i32);
    assert_eq!(back.agent_url_config.expect("urls").agentn_url, "https://agentn.api5.cursor.sh");
    // An empty official answer gets just the knob.
    let only = GetServerConfigResponse::decode(adjust(&[], Http2Config::ForceAllDisabled).as_slice()).expect("decodes");
    assert_eq!(only.http2_config, Http2Config::ForceAllDisabled as i32);
}

#[test]
fn official_means_no_change() {
    assert_eq!(forced(CursorHttp2::Official), None);
    assert_eq!(forced(CursorHttp2::Disabled), Some(Http2Config::ForceAllDisabled));
    assert_eq!(forced(CursorHttp2::BidiDisabled), Some(Http2Config::ForceBidiDisabled));
    assert_eq!(forced(CursorHttp2::Enabled), Some(Http2Config::ForceAllEnabled));
    assert_eq!(forced(CursorHttp2::BidiEnabled), Some(Http2Config::ForceBidiEnabled));
}
