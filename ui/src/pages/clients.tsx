import { useState } from "preact/hooks";
import { api, type ClientSetup, type EnvSetup, type Model, type SetupPreview, type SetupResult } from "../ipc";
import { clientCard, diffLines, routeForm, routeOptions, type RouteForm } from "../clients";
import { CopyButton, ErrorNotice, View, useAction, useLoad } from "../ui";

function Diff({ p }: { p: SetupPreview }) {
  return (
    <div class="preview">
      {p.changesFile ? (
        <>
          <p>
            Keyhaven would change <code class="wrap">{p.path}</code>:
          </p>
          <pre class="diff" tabIndex={0} aria-label={`Change to ${p.path}`}>
            {diffLines(p.diff).map((l, i) => (
              <span key={i} class={`d-${l.kind}`}>
                {l.text}
              </span>
            ))}
          </pre>
        </>
      ) : (
        <p>
          <code class="wrap">{p.path}</code> would stay as it is.
        </p>
      )}
      {p.notes.map((n) => (
        <p class="muted" key={n}>
          {n}
        </p>
      ))}
    </div>
  );
}

function Outcome({ r, action }: { r: SetupResult; action: "route" | "restore" }) {
  const done = action === "route" ? "routed through Keyhaven" : "restored";
  return (
    <div class="notice ok" role="status">
      <p>
        <strong>{r.changed ? `Done: ${r.path} ${done}.` : `${r.path} was already ${done}; nothing changed.`}</strong>
      </p>
      {r.backup && (
        <p>
          {action === "route" ? "Backup of the original" : "The original file is still at"}: <code class="wrap">{r.backup}</code>
        </p>
      )}
      {r.notes.map((n) => (
        <p key={n}>{n}</p>
      ))}
      {r.changed && (
        <p>
          <strong>{r.restartHint}</strong>
        </p>
      )}
    </div>
  );
}

function ClientCardView({ c, models, onChange }: { c: ClientSetup; models: Model[]; onChange: () => void }) {
  const card = clientCard(c);
  const [form, setForm] = useState<RouteForm>(() => routeForm(models));
  const [preview, setPreview] = useState<{ kind: "route" | "restore"; p: SetupPreview }>();
  const [result, setResult] = useState<{ kind: "route" | "restore"; r: SetupResult }>();
  const act = useAction();
  const id = `client-${card.client}`;
  const opts = routeOptions(card, form);
  const run = async (kind: "route" | "restore") => {
    setPreview(undefined);
    const r = await act.run(() => (kind === "route" ? api().routeClient(card.client, opts) : api().undoClient(card.client)));
    if (r) {
      setResult({ kind, r });
      onChange();
    }
  };
  const show = async (kind: "route" | "restore") => {
    setResult(undefined);
    const p = await act.run(() => (kind === "route" ? api().previewRoute(card.client, opts) : api().previewUndo(card.client)));
    if (p) setPreview({ kind, p });
  };
  return (
    <li class="card" id={id} aria-labelledby={`${id}-title`}>
      <div class="card-head">
        <div>
          <h2 id={`${id}-title`}>{card.title}</h2>
          <span class={`tag ${card.detected ? "status-ok" : "status-muted"}`}>{card.detected ? "detected" : "not detected"}</span>{" "}
          <span class={`tag ${card.state === "routed" || card.state === "routedByHand" ? "status-ok" : "status-muted"}`} data-testid="routed">
            {card.state === "routed" || card.state === "routedByHand" ? "routed" : "not routed"}
          </span>
          <p>{card.status}</p>
          <p class="muted">
            Config file: <code class="wrap">{card.configPath}</code>
          </p>
          {card.notes.map((n) => (
            <p class="muted" key={n}>
              {n}
            </p>
          ))}
        </div>
      </div>
      {card.takesModel && (
        <div class="row2">
          <div class="field">
            <label for={`${id}-model`}>Model {card.title} asks for</label>
            <select id={`${id}-model`} value={form.model} onChange={(e) => setForm({ ...form, model: e.currentTarget.value })}>
              <option value="">(leave the client's own choice)</option>
              {models.map((m) => (
                <option key={m.name} value={m.name}>
                  {m.name}
                </option>
              ))}
            </select>
          </div>
          {card.client === "claudeCode" && (
            <div class="field">
              <label for={`${id}-small`}>Small, fast model (optional)</label>
              <select id={`${id}-small`} value={form.smallModel} onChange={(e) => setForm({ ...form, smallModel: e.currentTarget.value })}>
                <option value="">(none)</option>
                {models.map((m) => (
                  <option key={m.name} value={m.name}>
                    {m.name}
                  </option>
                ))}
              </select>
            </div>
          )}
        </div>
      )}
      {card.takesHttp2 && (
        <label class="check">
          <input type="checkbox" checked={form.disableHttp2} onChange={(e) => setForm({ ...form, disableHttp2: e.currentTarget.checked })} /> Turn off
          HTTP/2 in Cursor (only if its requests hang behind the proxy)
        </label>
      )}
      <div class="actions">
        <button type="button" class="primary" disabled={act.busy} onClick={() => void run("route")}>
          {card.routeLabel}
        </button>
        <button type="button" disabled={act.busy} onClick={() => void show("route")}>
          Preview route
        </button>
        <button type="button" disabled={act.busy || !card.canRestore} title={card.canRestore ? undefined : "Keyhaven has no recorded change to undo"} onClick={() => void run("restore")}>
          Restore original
        </button>
        <button type="button" disabled={act.busy || !card.canRestore} onClick={() => void show("restore")}>
          Preview restore
        </button>
      </div>
      {act.busy && <p role="status">Working…</p>}
      {act.error && <ErrorNotice error={act.error} />}
      {preview && <Diff p={preview.p} />}
      {result && <Outcome r={result.r} action={result.kind} />}
      {card.client === "cursor" && card.state === "routed" && !result && (
        <p class="notice warn">
          <strong>{card.restartHint}</strong> Cursor reads these settings only at start-up.
        </p>
      )}
    </li>
  );
}

function GenericCard() {
  const res = useLoad(() => api().envSetup());
  const [issued, setIssued] = useState<EnvSetup>();
  const act = useAction();
  const fetchExports = async () => {
    const e = await api().routeEnv();
    setIssued(e);
    res.reload();
    return e.exports;
  };
  return (
    <li class="card" id="client-env" aria-labelledby="client-env-title">
      <h2 id="client-env-title">Generic (any OpenAI or Anthropic SDK, curl, scripts)</h2>
      <p>
        Paste these lines into a shell (or your shell's profile): tools that read <code>OPENAI_BASE_URL</code> or <code>ANTHROPIC_BASE_URL</code> then
        call Keyhaven. The token only tells Keyhaven which client a call came from; your provider keys stay in Keyhaven.
      </p>
      <View res={res}>
        {(e) => (
          <>
            <pre class="exports" tabIndex={0} aria-label="Shell exports" data-testid="exports">
              {(issued ?? e).exports}
            </pre>
            <div class="actions">
              <CopyButton label="Copy exports" get={fetchExports} />
              <CopyButton label="Copy unset lines" get={() => e.unsets} />
              {e.tokenIssued && (
                <button
                  type="button"
                  class="danger"
                  disabled={act.busy}
                  onClick={() =>
                    void act.run(() => api().undoEnv()).then((r) => {
                      if (r) {
                        setIssued(undefined);
                        res.reload();
                      }
                    })
                  }
                >
                  Revoke the token
                </button>
              )}
            </div>
            <p class="muted">
              {e.tokenIssued ? "A token is issued; Copy puts it in the lines." : "Copy issues a token the first time."} Open a new shell (or run the
              lines) for them to take effect.
            </p>
            {act.error && <ErrorNotice error={act.error} />}
          </>
        )}
      </View>
    </li>
  );
}

export function Clients(_: { args: string[] }) {
  const clients = useLoad(() => api().clients());
  const models = useLoad(() => api().models());
  return (
    <>
      <p>
        Route a client through Keyhaven with one click: Keyhaven edits that client's own config file (keeping its comments), saves a backup next to
        it, and Restore puts the original back. Preview shows the exact change first.
      </p>
      <View res={models}>
        {(ms) => (
          <>
            {ms.length === 0 && (
              <div class="notice warn">
                No models yet: <a href="#/providers">add a provider and a model</a> first, so routed clients have something to call.
              </div>
            )}
            <View res={clients}>
              {(cs) => (
                <ul class="cards">
                  {cs.map((c) => (
                    <ClientCardView key={c.client} c={c} models={ms} onChange={clients.reload} />
                  ))}
                  <GenericCard />
                </ul>
              )}
            </View>
          </>
        )}
      </View>
    </>
  );
}
