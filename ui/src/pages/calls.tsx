import { useState } from "preact/hooks";
import { api, type CallQuery, type CallStatus, type CallSummary, type ContextBlock } from "../ipc";
import { COST_SOURCE_LABEL, STATUS_LABEL, exportFileName, formatCost, formatMs, formatTime, formatTokens, prettyBody, sinceDay } from "../format";
import { DownloadButton, Empty, ErrorNotice, View, useAction, useLoad } from "../ui";

const PAGE = 50;
const STATUSES = Object.keys(STATUS_LABEL) as CallStatus[];

interface Filters {
  model: string;
  provider: string;
  client: string;
  conversation: string;
  session: string;
  status: "" | CallStatus;
  since: "" | "1h" | "24h" | "7d";
}

const SINCE_MS = { "1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000 } as const;

/** The export's start: the "Since" filter as an RFC 3339 time, else the last 30 days. */
function exportSince(since: keyof typeof SINCE_MS | ""): string {
  return since ? new Date(Date.now() - SINCE_MS[since]).toISOString() : sinceDay(30, Date.now());
}

function Status({ s }: { s: CallStatus }) {
  return <span class={`tag status-${s}`}>{STATUS_LABEL[s]}</span>;
}

/** A session id shortened for a table cell (client ids are UUIDs). */
function shortSession(id: string): string {
  return id.length > 13 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

/** Calls grouped by client session (Claude Code, Codex) over the last 7 days; picking one filters the list. */
function Sessions({ current, pick }: { current: string; pick: (session: string) => void }) {
  const res = useLoad(() => api().sessions({ days: 7, limit: 20 }), []);
  return (
    <View res={res}>
      {(list) =>
        list.sessions.length === 0 ? null : (
          <details class="sessions" open={current !== ""}>
            <summary>Sessions (last 7 days): {list.sessions.length}</summary>
            <table class="table">
              <thead>
                <tr>
                  <th scope="col">Session</th>
                  <th scope="col">Client</th>
                  <th scope="col">Last active</th>
                  <th scope="col" class="num">Calls</th>
                  <th scope="col" class="num">Errors</th>
                  <th scope="col" class="num">Tokens in/out</th>
                  <th scope="col" class="num">Cost</th>
                </tr>
              </thead>
              <tbody>
                {list.sessions.map((s) => (
                  <tr key={s.sessionId} class={s.sessionId === current ? "selected" : undefined}>
                    <td>
                      <button type="button" class="link" title={s.sessionId} aria-label={`Session ${s.sessionId}`} onClick={() => pick(s.sessionId)}>
                        <code>{shortSession(s.sessionId)}</code>
                      </button>
                    </td>
                    <td>{s.client || "—"}</td>
                    <td>{formatTime(s.lastMs)}</td>
                    <td class="num">{s.calls}</td>
                    <td class="num">{s.errors}</td>
                    <td class="num">
                      {formatTokens(s.inputTokens)} / {formatTokens(s.outputTokens)}
                    </td>
                    <td class="num">{formatCost(s.costMicros)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </details>
        )
      }
    </View>
  );
}

/** The client Cursor Tab suggestions are recorded under (FIM calls). */
export const TAB_CLIENT = "cursor-tab";

/** Whether a call served a Cursor Tab suggestion. */
export function isTab(c: { client: string }): boolean {
  return c.client === TAB_CLIENT;
}

function CallList() {
  const empty: Filters = { model: "", provider: "", client: "", conversation: "", session: "", status: "", since: "" };
  const [draft, setDraft] = useState<Filters>(empty);
  const [filters, setFilters] = useState(draft);
  const [offset, setOffset] = useState(0);
  const query: CallQuery = {
    limit: PAGE,
    offset,
    model: filters.model.trim() || null,
    provider: filters.provider.trim() || null,
    client: filters.client.trim() || null,
    conversation: filters.conversation.trim() || null,
    session: filters.session.trim() || null,
    status: filters.status || null,
    sinceMs: filters.since ? Date.now() - SINCE_MS[filters.since] : null,
  };
  const res = useLoad(() => api().calls(query), [JSON.stringify({ ...filters, offset })]);
  const set = (k: keyof Filters) => (e: Event) => setDraft({ ...draft, [k]: (e.currentTarget as HTMLInputElement).value });
  const filtered = Object.values(filters).some(Boolean);
  const bySession = (session: string) => {
    const next = { ...filters, session };
    setDraft(next);
    setFilters(next);
    setOffset(0);
  };
  return (
    <>
      <Sessions current={filters.session} pick={bySession} />
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault();
          setOffset(0);
          setFilters(draft);
        }}
      >
        {(["model", "provider", "client", "conversation", "session"] as const).map((k) => (
          <label key={k}>
            {k[0]!.toUpperCase() + k.slice(1)}
            <input value={draft[k]} onInput={set(k)} />
          </label>
        ))}
        <label>
          Status
          <select value={draft.status} onChange={set("status")}>
            <option value="">any</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {STATUS_LABEL[s]}
              </option>
            ))}
          </select>
        </label>
        <label>
          Since
          <select value={draft.since} onChange={set("since")}>
            <option value="">any time</option>
            <option value="1h">last hour</option>
            <option value="24h">last 24 hours</option>
            <option value="7d">last 7 days</option>
          </select>
        </label>
        <button type="submit">Apply</button>
        <button
          type="button"
          aria-pressed={filters.client === TAB_CLIENT}
          title="Only Cursor Tab suggestions (fill-in-the-middle calls)"
          onClick={() => {
            const next = { ...filters, client: filters.client === TAB_CLIENT ? "" : TAB_CLIENT };
            setDraft(next);
            setFilters(next);
            setOffset(0);
          }}
        >
          Tab
        </button>
        <button type="button" onClick={res.reload}>
          Refresh
        </button>
      </form>
      <p>
        <DownloadButton
          label={`Download CSV (${filters.since ? `last ${filters.since}` : "last 30 days"}, every call, no bodies)`}
          load={() => api().exportCalls({ format: "csv", since: exportSince(filters.since), until: null })}
          name={() => exportFileName("calls", exportSince(filters.since).slice(0, 10), sinceDay(1, Date.now()))}
        />
      </p>
      <View res={res}>
        {(page) =>
          page.calls.length === 0 ? (
            <Empty title={filtered ? "No calls match these filters." : offset > 0 ? "No more calls." : "No calls recorded yet."}>
              <p>{filtered ? "Clear a filter and apply again." : "Send a request to the gateway (or press Test on a model) and it appears here."}</p>
            </Empty>
          ) : (
            <>
              <table class="table calls">
                <thead>
                  <tr>
                    <th scope="col">Started</th>
                    <th scope="col">Status</th>
                    <th scope="col">Client</th>
                    <th scope="col">Tab</th>
                    <th scope="col">Session</th>
                    <th scope="col">Model</th>
                    <th scope="col">Provider</th>
                    <th scope="col" class="num">Tokens in/out</th>
                    <th scope="col" class="num">Cost</th>
                    <th scope="col" class="num">TTFT</th>
                    <th scope="col" class="num">Total</th>
                  </tr>
                </thead>
                <tbody>
                  {page.calls.map((c) => (
                    <tr key={c.id}>
                      <td>
                        <a href={`#/calls/${encodeURIComponent(c.id)}`}>{formatTime(c.startedMs)}</a>
                      </td>
                      <td>
                        <Status s={c.status} />
                      </td>
                      <td>{c.client || "—"}</td>
                      <td>{isTab(c) ? <span class="badge" title="A Cursor Tab suggestion">Tab</span> : ""}</td>
                      <td>
                        {c.sessionId ? (
                          <button type="button" class="link" title={`Only the calls of session ${c.sessionId}`} onClick={() => bySession(c.sessionId!)}>
                            <code>{shortSession(c.sessionId)}</code>
                          </button>
                        ) : (
                          "—"
                        )}
                      </td>
                      <td>{c.model}</td>
                      <td>{c.provider ?? "—"}</td>
                      <td class="num">
                        {formatTokens(c.inputTokens)} / {formatTokens(c.outputTokens)}
                        {c.usageEstimated && <abbr title="estimated">~</abbr>}
                      </td>
                      <td class="num">{formatCost(c.costMicros)}</td>
                      <td class="num">{formatMs(c.ttftMs)}</td>
                      <td class="num">{formatMs(c.totalMs)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
              <nav class="pager" aria-label="Pages of calls">
                <button type="button" disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE))}>
                  Previous
                </button>
                <span>
                  {offset + 1}–{offset + page.calls.length}
                </span>
                <button type="button" disabled={!page.hasMore} onClick={() => setOffset(offset + PAGE)}>
                  Next
                </button>
              </nav>
            </>
          )
        }
      </View>
    </>
  );
}

function Row({ k, v }: { k: string; v: preact.ComponentChildren }) {
  return (
    <>
      <dt>{k}</dt>
      <dd>{v}</dd>
    </>
  );
}

function Summary({ c, priceVersion }: { c: CallSummary; priceVersion: string | null }) {
  return (
    <div class="cols">
      <section>
        <h2>Call</h2>
        <dl>
          <Row k="Id" v={<code>{c.id}</code>} />
          <Row k="Status" v={<><Status s={c.status} /> {c.httpStatus ?? ""}</>} />
          {c.errorKind && <Row k="Error" v={`${c.errorKind}: ${c.errorMessage ?? ""}`} />}
          <Row k="Client" v={c.client || "—"} />
          {c.conversationId && <Row k="Conversation" v={<code>{c.conversationId}</code>} />}
          {c.sessionId && <Row k="Session" v={<code>{c.sessionId}</code>} />}
          {c.requestId && <Row k="Request" v={<code>{c.requestId}</code>} />}
          <Row k="Dialect" v={c.dialect} />
          <Row k="Model" v={`${c.model}${c.upstreamModel ? ` → ${c.upstreamModel}` : ""}`} />
          {c.budgetDowngrade && <Row k="Budget downgrade" v={`${c.model} → ${c.budgetDowngrade} (a budget was used up)`} />}
          <Row k="Provider" v={c.provider ?? "—"} />
          <Row k="Streamed" v={c.stream ? "yes" : "no"} />
          <Row k="Retries" v={c.retries} />
        </dl>
      </section>
      <section>
        <h2>Timings</h2>
        <dl>
          <Row k="Started" v={formatTime(c.startedMs)} />
          <Row k="Finished" v={formatTime(c.finishedMs)} />
          <Row k="Time to first token" v={formatMs(c.ttftMs)} />
          <Row k="Total" v={formatMs(c.totalMs)} />
        </dl>
        <h2>Tokens and cost</h2>
        <dl>
          <Row k="Input" v={formatTokens(c.inputTokens)} />
          <Row k="Output" v={formatTokens(c.outputTokens)} />
          <Row k="Cache read / write" v={`${formatTokens(c.cacheReadTokens)} / ${formatTokens(c.cacheWriteTokens)}`} />
          <Row k="Reasoning" v={formatTokens(c.reasoningTokens)} />
          {c.usageEstimated && <Row k="Note" v="Usage estimated (the upstream reported none)" />}
          <Row k="Cost" v={`${formatCost(c.costMicros)}${priceVersion ? ` (prices ${priceVersion})` : ""}`} />
          {c.costSource && <Row k="Cost source" v={COST_SOURCE_LABEL[c.costSource]} />}
        </dl>
      </section>
    </div>
  );
}

/** A byte count for people: `812 B`, `4.2 KB`, `1.3 MB`. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MB`;
}

/** The line above the context table: how many blocks and their total size. */
export function contextTotal(blocks: ContextBlock[]): string {
  const total = blocks.reduce((sum, b) => sum + b.bytes, 0);
  return `${blocks.length} ${blocks.length === 1 ? "block" : "blocks"}, ${formatBytes(total)} in all`;
}

/** What the user attached to a Cursor message, as it went into the prompt. */
function ContextBlocks({ blocks }: { blocks: ContextBlock[] }) {
  return (
    <>
      <h2>Context in the prompt</h2>
      <p class="muted">{contextTotal(blocks)} (attached in Cursor to this run's message).</p>
      <table>
        <thead>
          <tr>
            <th scope="col">Kind</th>
            <th scope="col">From</th>
            <th scope="col" class="num">Size</th>
          </tr>
        </thead>
        <tbody>
          {blocks.map((b, i) => (
            <tr key={i}>
              <td>{b.kind}</td>
              <td>{b.source ? <code>{b.source}</code> : "—"}</td>
              <td class="num">{formatBytes(b.bytes)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

function CallDetailView({ id }: { id: string }) {
  const res = useLoad(() => api().call(id), [id]);
  const act = useAction();
  return (
    <>
      <p>
        <a href="#/calls">← All calls</a>
      </p>
      <View res={res}>
        {(d) => (
          <>
            <Summary c={d.summary} priceVersion={d.priceVersion} />
            {d.notes.length > 0 && (
              <section class="notes">
                <h2>Notes</h2>
                <ul>
                  {d.notes.map((n) => (
                    <li>{n}</li>
                  ))}
                </ul>
              </section>
            )}
            {d.contextBlocks.length > 0 && <ContextBlocks blocks={d.contextBlocks} />}
            <h2>Request body</h2>
            {d.requestBody === null ? <p class="muted">No body recorded (bodies are kept only while “capture bodies” is on in Settings).</p> : <pre class="body" tabIndex={0}>{prettyBody(d.requestBody)}</pre>}
            <h2>Response body</h2>
            {d.responseBody === null ? <p class="muted">No body recorded.</p> : <pre class="body" tabIndex={0}>{prettyBody(d.responseBody)}</pre>}
            <div class="actions">
              <button
                type="button"
                class="danger"
                disabled={act.busy}
                onClick={() => confirm("Delete this call from the history?") && void act.run(() => api().deleteCall(id)).then((r) => r && (location.hash = "#/calls"))}
              >
                Delete call
              </button>
            </div>
            {act.error && <ErrorNotice error={act.error} />}
          </>
        )}
      </View>
    </>
  );
}

export function Calls({ args }: { args: string[] }) {
  return args[0] ? <CallDetailView id={args[0]} /> : <CallList />;
}
