// Settings → Web tools: who answers the agent's web_search (none, Brave Search, SearXNG), who
// fetches pages for fetch_url (Keyhaven after approval, or the editor), the Brave key
// (write-only, like provider keys) and a test search against the settings in the file.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, type WebFetchMode, type WebSearchKind, type WebSettings, type WebSettingsInput, type WebTestResult } from "../ipc";
import { ConfirmButton, ErrorNotice, Field, useAction } from "../ui";

export interface WebForm {
  search: WebSearchKind;
  searchUrl: string;
  fetch: WebFetchMode;
}

export const SEARCH_KINDS: { value: WebSearchKind; label: string }[] = [
  { value: "none", label: "None (the model is told web search is unavailable)" },
  { value: "brave", label: "Brave Search API (needs an API key)" },
  { value: "searxng", label: "SearXNG (your instance; no key)" },
];

export const toWebForm = (w: WebSettings): WebForm => ({ search: w.search, searchUrl: w.searchUrl ?? "", fetch: w.fetch });

/** Field errors of the form (the engine validates again). */
export function validateWeb(f: WebForm): Partial<Record<keyof WebForm, string>> {
  const e: Partial<Record<keyof WebForm, string>> = {};
  const url = f.searchUrl.trim();
  if (url && !/^https?:\/\/[^\s/]+/.test(url)) e.searchUrl = "An http(s) URL, e.g. https://search.example.org";
  else if (f.search === "searxng" && !url) e.searchUrl = "SearXNG needs your instance's URL.";
  return e;
}

/** The PUT /api/web body: an empty URL removes it (Brave then uses its public endpoint). */
export const webInput = (f: WebForm): WebSettingsInput => ({
  search: f.search,
  searchUrl: f.searchUrl.trim(),
  fetch: f.fetch,
  fetchMaxBytes: null,
  timeoutMs: null,
});

/** One line about a test search. */
export function testSummary(r: WebTestResult): string {
  if (!r.ok) return `Failed: ${r.message}`;
  const first = r.firstTitle ? ` First: “${r.firstTitle}”.` : "";
  return `${r.hits} result${r.hits === 1 ? "" : "s"} in ${r.latencyMs} ms.${first}`;
}

/** Where the Brave key is, without the key. */
export function keyStatus(w: WebSettings): string {
  const where = w.key.source === "env" ? `environment variable ${w.key.name}` : `keyring entry ${w.key.name}`;
  return w.key.hasKey ? `A key is set (${where}).` : `No key set (${where}).`;
}

function BraveKey({ w, onChange }: { w: WebSettings; onChange: (w: WebSettings) => void }) {
  const [value, setValue] = useState("");
  const act = useAction();
  const has = w.key.hasKey;
  const env = w.key.source === "env";
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!value.trim()) return;
    const r = await act.run(() => api().setWebKey(value.trim()));
    setValue("");
    if (r) onChange(r);
  };
  return (
    <form class="inline" onSubmit={submit} aria-label="Brave Search API key">
      <label for="web-key">{has ? "New Brave Search API key" : "Brave Search API key"}</label>
      <input id="web-key" type="password" autoComplete="off" spellcheck={false} value={value} disabled={env} placeholder={has ? "paste the replacement" : "paste the key"} onInput={(e) => setValue(e.currentTarget.value)} />
      <button type="submit" disabled={act.busy || env || !value.trim()}>
        {has ? "Replace key" : "Save key"}
      </button>
      {has && !env && <ConfirmButton label="Remove key" question="Remove the Brave Search key from the keyring?" disabled={act.busy} onConfirm={() => void act.run(() => api().deleteWebKey()).then((r) => r && onChange(r))} />}
      <small class="muted" id="web-key-status">
        {keyStatus(w)} Write-only: the key goes to the OS keyring and is never shown again; it applies to the next search.
      </small>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function TestSearch() {
  const [query, setQuery] = useState("keyhaven");
  const [result, setResult] = useState<WebTestResult>();
  const act = useAction();
  const run = async (e: Event) => {
    e.preventDefault();
    setResult(undefined);
    const r = await act.run(() => api().testWebSearch(query.trim()));
    if (r) setResult(r);
  };
  return (
    <form class="inline" onSubmit={run} aria-label="Test search">
      <label for="web-test-query">Test query</label>
      <input id="web-test-query" value={query} onInput={(e) => setQuery(e.currentTarget.value)} />
      <button type="submit" disabled={act.busy || !query.trim()}>
        {act.busy ? "Searching…" : "Test search"}
      </button>
      <small class="muted">Uses the saved settings (before a restart applies them to Cursor).</small>
      {result && (
        <div class={`notice ${result.ok ? "ok" : "error"}`} role="status" id="web-test-result">
          {testSummary(result)}
        </div>
      )}
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

export function WebToolsSection({ initial }: { initial: WebSettings }) {
  const [w, setW] = useState(initial);
  const [form, setForm] = useState(toWebForm(initial));
  const [saved, setSaved] = useState(false);
  // Only a later `initial` replaces the form: an effect on mount would run after the first paint
  // and could undo a choice the user already made.
  const shown = useRef(initial);
  useEffect(() => {
    if (shown.current === initial) return;
    shown.current = initial;
    setW(initial);
    setForm(toWebForm(initial));
  }, [initial]);
  const act = useAction();
  const errors = validateWeb(form);
  const submit = async (e: Event) => {
    e.preventDefault();
    setSaved(false);
    if (Object.keys(errors).length) return;
    const r = await act.run(() => api().setWeb(webInput(form)));
    if (r) {
      setW(r);
      setForm(toWebForm(r));
      setSaved(true);
    }
  };
  return (
    <section class="panel" aria-labelledby="web-title" id="web-tools">
      <h2 id="web-title">Web tools</h2>
      <p class="muted">What the Cursor agent's web_search and fetch_url tools use when Keyhaven runs the turn.</p>
      <form onSubmit={submit} noValidate aria-label="Web tools settings">
        <Field label="Search provider" id="web-search">
          <select id="web-search" value={form.search} onChange={(e) => setForm({ ...form, search: e.currentTarget.value as WebSearchKind })}>
            {SEARCH_KINDS.map((k) => (
              <option key={k.value} value={k.value}>
                {k.label}
              </option>
            ))}
          </select>
        </Field>
        {form.search !== "none" && (
          <Field
            label="Search URL"
            id="web-searchUrl"
            error={errors.searchUrl}
            hint={form.search === "brave" ? "Empty: Brave's public endpoint, https://api.search.brave.com." : "Your instance's base URL; it must allow format=json."}
          >
            <input id="web-searchUrl" value={form.searchUrl} placeholder={form.search === "brave" ? "https://api.search.brave.com" : "https://search.example.org"} onInput={(e) => setForm({ ...form, searchUrl: e.currentTarget.value })} aria-invalid={!!errors.searchUrl} />
          </Field>
        )}
        <fieldset>
          <legend>Who fetches pages for fetch_url</legend>
          <label class="check">
            <input type="radio" name="web-fetch" value="keyhaven" checked={form.fetch === "keyhaven"} onChange={() => setForm({ ...form, fetch: "keyhaven" })} /> Keyhaven, after you approve the URL (readable text, size-capped)
          </label>
          <label class="check">
            <input type="radio" name="web-fetch" value="editor" checked={form.fetch === "editor"} onChange={() => setForm({ ...form, fetch: "editor" })} /> The Cursor editor
          </label>
        </fieldset>
        <div class="actions">
          <button type="submit" class="primary" disabled={act.busy}>
            Save web tools
          </button>
        </div>
        {act.error && <ErrorNotice error={act.error} />}
        {saved && <div class="notice ok" role="status">Saved.</div>}
        {w.restartRequired && (
          <div class="notice" role="status" id="web-restart">
            Restart Keyhaven to apply the saved web settings.
          </div>
        )}
      </form>
      {form.search === "brave" && <BraveKey w={w} onChange={setW} />}
      {w.search !== "none" && <TestSearch />}
    </section>
  );
}
