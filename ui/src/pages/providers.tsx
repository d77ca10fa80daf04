import { useState } from "preact/hooks";
import { api, type ConnectionTest, type Model, type Provider } from "../ipc";
import { formatMs, plural } from "../format";
import {
  KINDS,
  PRESETS,
  emptyModelForm,
  hasErrors,
  modelFormOf,
  modelInput,
  presetForm,
  providerFormOf,
  providerInput,
  validateModel,
  validateProvider,
  type ModelForm,
  type ProviderForm,
  type ProviderPreset,
} from "../presets";
import { ConfirmButton, Empty, ErrorNotice, Field, View, useAction, useLoad } from "../ui";

function TestResult({ t }: { t: ConnectionTest }) {
  return (
    <div class={`notice ${t.ok ? "ok" : "error"}`} role="status">
      {t.ok ? "Works" : `Failed${t.errorKind ? ` (${t.errorKind})` : ""}`}: {t.message} · {t.model} via {t.provider} in {formatMs(t.latencyMs)} ·{" "}
      <a href={`#/calls/${encodeURIComponent(t.callId)}`}>see the call</a>
    </div>
  );
}

/** Write-only: the key goes in, and is never shown again (not even masked). */
function KeyForm({ p, onDone }: { p: Provider; onDone: () => void }) {
  const [value, setValue] = useState("");
  const act = useAction();
  const id = `key-${p.name}`;
  const has = !!p.key?.hasKey;
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!value.trim()) return;
    const r = await act.run(() => api().setKey(p.name, value.trim()));
    setValue("");
    if (r) onDone();
  };
  return (
    <form class="inline" onSubmit={submit}>
      <label for={id}>{has ? "New API key" : "API key"} for {p.name}</label>
      <input id={id} type="password" autoComplete="off" spellcheck={false} value={value} placeholder={has ? "paste the replacement" : "paste the key"} onInput={(e) => setValue(e.currentTarget.value)} />
      <button type="submit" disabled={act.busy || !value.trim()}>
        {has ? "Replace key" : "Save key"}
      </button>
      {has && <ConfirmButton label="Remove key" question={`Remove ${p.name}'s key from the keyring?`} disabled={act.busy} onConfirm={() => void act.run(() => api().deleteKey(p.name)).then((r) => r && onDone())} />}
      <small class="muted">Write-only: the key goes to the OS keyring, is never shown again, and is only ever sent to {p.baseUrl ? originOf(p.baseUrl) ?? p.baseUrl : "this provider"}.</small>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function ProviderFields({ form, setForm, show, prefix }: { form: ProviderForm; setForm: (f: ProviderForm) => void; show: Partial<Record<keyof ProviderForm, string>>; prefix: string }) {
  const set = (k: keyof ProviderForm) => (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });
  const err = (k: keyof ProviderForm) => ({ "aria-invalid": !!show[k], "aria-describedby": show[k] ? `${prefix}-${k}-error` : undefined });
  return (
    <>
      <Field label="Name" id={`${prefix}-name`} error={show.name}>
        <input id={`${prefix}-name`} value={form.name} onInput={set("name")} {...err("name")} />
      </Field>
      <Field label="Kind" id={`${prefix}-kind`}>
        <select id={`${prefix}-kind`} value={form.kind} onChange={set("kind")}>
          {KINDS.map((k) => (
            <option key={k}>{k}</option>
          ))}
        </select>
      </Field>
      <Field label="Base URL" id={`${prefix}-baseUrl`} error={show.baseUrl}>
        <input id={`${prefix}-baseUrl`} type="url" value={form.baseUrl} onInput={set("baseUrl")} {...err("baseUrl")} />
      </Field>
      <Field label="Key" id={`${prefix}-keySource`} hint="Store the key itself with “Set key” (keyring; it is bound to this base URL's server). An environment variable can be used here only for a server config.toml already uses it for.">
        <select id={`${prefix}-keySource`} value={form.keySource} onChange={set("keySource")}>
          <option value="keyring">OS keyring</option>
          <option value="env">Environment variable</option>
          <option value="none">No key (local server)</option>
        </select>
      </Field>
      {form.keySource !== "none" && (
        <Field label={form.keySource === "env" ? "Variable name" : "Keyring entry"} id={`${prefix}-keyName`} error={show.keyName}>
          <input id={`${prefix}-keyName`} value={form.keyName} onInput={set("keyName")} {...err("keyName")} />
        </Field>
      )}
    </>
  );
}

/** The origin (scheme, host, port) of a URL, or null; keys are bound to one. */
export function originOf(url: string): string | null {
  try {
    const u = new URL(url.trim());
    return u.protocol === "http:" || u.protocol === "https:" ? u.origin : null;
  } catch {
    return null;
  }
}

function EditProvider({ p, existing, onDone, onCancel }: { p: Provider; existing: string[]; onDone: () => void; onCancel: () => void }) {
  const [form, setForm] = useState<ProviderForm>(providerFormOf(p));
  const [newKey, setNewKey] = useState("");
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validateProvider(form, existing.filter((n) => n !== p.name));
  // A stored key is only ever sent to the origin it was stored for: moving a provider that has a
  // key to another origin needs the key entered again.
  const moved = form.keySource !== "none" && originOf(form.baseUrl) !== originOf(p.baseUrl);
  const keyMissing = moved && !newKey.trim();
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (hasErrors(errors) || keyMissing) return;
    const input = providerInput(form, undefined, p);
    if (newKey.trim()) input.keyValue = newKey.trim();
    const r = await act.run(() => api().updateProvider(p.name, input));
    setNewKey("");
    if (r) onDone();
  };
  return (
    <form class="panel" onSubmit={submit} noValidate aria-label={`Edit provider ${p.name}`}>
      <h3>Edit {p.name}</h3>
      <ProviderFields form={form} setForm={setForm} show={touched ? errors : {}} prefix={`pe-${p.name}`} />
      {moved && (
        <Field
          label="API key for the new address"
          id={`pe-${p.name}-newKey`}
          error={touched && keyMissing ? "Enter the key: the stored one is only ever sent to its original address." : undefined}
          hint={`The base URL moves to another server (${originOf(form.baseUrl) ?? "?"}). Keyhaven never sends a stored key to a server other than the one it was entered for, so enter the key for the new server; it goes to the OS keyring.`}
        >
          <input id={`pe-${p.name}-newKey`} type="password" autoComplete="off" spellcheck={false} value={newKey} onInput={(e) => setNewKey(e.currentTarget.value)} aria-invalid={touched && keyMissing} />
        </Field>
      )}
      {form.name.trim() !== p.name && p.modelCount > 0 && <p class="muted">Renaming moves its {p.modelCount} models to the new name.</p>}
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy}>
          Save provider
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function ProviderRow({ p, names, onChange }: { p: Provider; names: string[]; onChange: () => void }) {
  const act = useAction();
  const [test, setTest] = useState<ConnectionTest>();
  const [open, setOpen] = useState<"key" | "edit" | undefined>();
  const h = p.health;
  const toggle = (what: "key" | "edit") => setOpen(open === what ? undefined : what);
  return (
    <li class="card" data-provider={p.name}>
      <div class="card-head">
        <div>
          <strong>{p.name}</strong> <span class="tag">{p.kind}</span> <code>{p.baseUrl}</code>
          <div class="muted">
            {plural(p.modelCount, "model")} ·{" "}
            {p.key === null ? "no key" : p.key.hasKey ? `key in ${p.key.source} (${p.key.name})` : <span class="warn-text">key missing ({p.key.source} {p.key.name})</span>}
            {h && (h.coolingDown ? <span class="warn-text"> · cooling down ({formatMs(h.cooldownRemainingMs)})</span> : ` · ${h.totalSuccesses} ok / ${h.totalFailures} failed`)}
          </div>
          {h?.lastError && <div class="muted">Last error: {h.lastError}</div>}
        </div>
        <div class="actions">
          <button type="button" disabled={act.busy || p.modelCount === 0} title={p.modelCount === 0 ? "Add a model first" : undefined} onClick={() => void act.run(() => api().testProvider(p.name)).then((t) => { if (t) { setTest(t); onChange(); } })}>
            {act.busy ? "Testing…" : "Test"}
          </button>
          <button type="button" aria-expanded={open === "edit"} onClick={() => toggle("edit")}>
            Edit
          </button>
          {p.key?.source !== "env" && (
            <button type="button" aria-expanded={open === "key"} onClick={() => toggle("key")}>
              {p.key?.hasKey ? "Replace key" : "Set key"}
            </button>
          )}
          <ConfirmButton
            label="Delete"
            question={p.modelCount > 0 ? `Delete ${p.name}? Its ${p.modelCount} models must go first.` : `Delete provider ${p.name}?`}
            confirmLabel="Delete provider"
            disabled={act.busy}
            onConfirm={() => void act.run(() => api().deleteProvider(p.name)).then(onChange)}
          />
        </div>
      </div>
      {open === "key" && <KeyForm p={p} onDone={() => { setOpen(undefined); onChange(); }} />}
      {open === "edit" && <EditProvider p={p} existing={names} onCancel={() => setOpen(undefined)} onDone={() => { setOpen(undefined); onChange(); }} />}
      {test && <TestResult t={test} />}
      {act.error && <ErrorNotice error={act.error} />}
    </li>
  );
}

function AddProvider({ existing, onDone }: { existing: string[]; onDone: () => void }) {
  const [preset, setPreset] = useState<ProviderPreset | undefined>(PRESETS[0]);
  const [form, setForm] = useState<ProviderForm>(presetForm(PRESETS[0]!));
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validateProvider(form, existing);
  const choose = (id: string) => {
    const p = PRESETS.find((x) => x.id === id);
    setPreset(p);
    if (p) setForm(presetForm(p));
  };
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (hasErrors(errors)) return;
    const r = await act.run(() => api().createProvider(providerInput(form, preset)));
    if (r) onDone();
  };
  return (
    <form class="panel" onSubmit={submit} noValidate aria-label="Add a provider">
      <h3>Add a provider</h3>
      <Field label="Preset" id="p-preset" hint={preset?.example ? `e.g. model ${preset.example}` : undefined}>
        <select id="p-preset" value={preset?.id ?? "custom"} onChange={(e) => choose(e.currentTarget.value)}>
          {PRESETS.map((p) => (
            <option key={p.id} value={p.id}>
              {p.label}
            </option>
          ))}
          <option value="custom">Custom</option>
        </select>
      </Field>
      <ProviderFields form={form} setForm={setForm} show={touched ? errors : {}} prefix="p" />
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy}>
          Add provider
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function ModelFields({ form, setForm, show, providers, prefix }: { form: ModelForm; setForm: (f: ModelForm) => void; show: Partial<Record<keyof ModelForm, string>>; providers: string[]; prefix: string }) {
  const set = (k: keyof ModelForm) => (e: Event) => setForm({ ...form, [k]: (e.currentTarget as HTMLInputElement).value });
  const text = (k: "name" | "upstream" | "aliases" | "contextWindow" | "maxOutputTokens", label: string, hint?: string, inputMode?: "numeric") => (
    <Field label={label} id={`${prefix}-${k}`} error={show[k]} hint={hint}>
      <input id={`${prefix}-${k}`} value={form[k]} inputMode={inputMode} onInput={set(k)} aria-invalid={!!show[k]} aria-describedby={show[k] ? `${prefix}-${k}-error` : undefined} />
    </Field>
  );
  const check = (k: "tools" | "vision" | "thinking", label: string) => (
    <label class="check">
      <input type="checkbox" checked={form[k]} onChange={(e) => setForm({ ...form, [k]: e.currentTarget.checked })} /> {label}
    </label>
  );
  return (
    <>
      {text("name", "Name", "What clients ask for, e.g. sonnet.")}
      <Field label="Provider" id={`${prefix}-provider`} error={show.provider}>
        <select id={`${prefix}-provider`} value={form.provider} onChange={set("provider")}>
          {providers.map((p) => (
            <option key={p}>{p}</option>
          ))}
        </select>
      </Field>
      {text("upstream", "Upstream model id", "The provider's name for it, e.g. claude-sonnet-4-5.")}
      {text("aliases", "Aliases", "Comma-separated, optional.")}
      {text("contextWindow", "Context window (tokens)", "Optional.", "numeric")}
      {text("maxOutputTokens", "Max output tokens", "Optional.", "numeric")}
      <fieldset>
        <legend>Capabilities</legend>
        {check("tools", "Tools (function calling)")}
        {check("vision", "Images")}
        {check("thinking", "Thinking / reasoning")}
        <Field label="Tool calls" id={`${prefix}-toolsMode`} hint="Emulated: Keyhaven describes tools in the prompt for models without native tools.">
          <select id={`${prefix}-toolsMode`} value={form.toolsMode} onChange={set("toolsMode")}>
            <option value="native">native</option>
            <option value="emulated">emulated</option>
            <option value="auto">auto</option>
          </select>
        </Field>
      </fieldset>
    </>
  );
}

function AddModel({ providers, existing, onDone }: { providers: string[]; existing: string[]; onDone: () => void }) {
  const [form, setForm] = useState<ModelForm>(emptyModelForm(providers[0]));
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validateModel(form, providers, existing);
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (hasErrors(errors)) return;
    const r = await act.run(() => api().createModel(modelInput(form)));
    if (r) {
      setForm(emptyModelForm(providers[0]));
      setTouched(false);
      onDone();
    }
  };
  return (
    <form class="panel" onSubmit={submit} noValidate aria-label="Add a model">
      <h3>Add a model</h3>
      <ModelFields form={form} setForm={setForm} show={touched ? errors : {}} providers={providers} prefix="m" />
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy || providers.length === 0}>
          Add model
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function EditModel({ m, providers, existing, onDone, onCancel }: { m: Model; providers: string[]; existing: string[]; onDone: () => void; onCancel: () => void }) {
  const [form, setForm] = useState<ModelForm>(modelFormOf(m));
  const [touched, setTouched] = useState(false);
  const act = useAction();
  const errors = validateModel(form, providers, existing.filter((n) => n !== m.name));
  const submit = async (e: Event) => {
    e.preventDefault();
    setTouched(true);
    if (hasErrors(errors)) return;
    const r = await act.run(() => api().updateModel(m.name, modelInput(form, m)));
    if (r) onDone();
  };
  return (
    <form onSubmit={submit} noValidate aria-label={`Edit model ${m.name}`}>
      <h3>Edit {m.name}</h3>
      <ModelFields form={form} setForm={setForm} show={touched ? errors : {}} providers={providers} prefix={`me-${m.name}`} />
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy}>
          Save model
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
    </form>
  );
}

function ModelRow({ m, providers, names, onChange }: { m: Model; providers: string[]; names: string[]; onChange: () => void }) {
  const act = useAction();
  const [test, setTest] = useState<ConnectionTest>();
  const [editing, setEditing] = useState(false);
  const caps = [m.capabilities.tools && "tools", m.capabilities.vision && "vision", m.capabilities.thinking && "thinking"].filter(Boolean).join(", ");
  return (
    <>
      <tr data-model={m.name}>
        <td>
          <strong>{m.name}</strong>
          {m.aliases.length > 0 && <div class="muted">also {m.aliases.join(", ")}</div>}
          {test && <TestResult t={test} />}
          {act.error && <ErrorNotice error={act.error} />}
        </td>
        <td>{m.provider}</td>
        <td>
          <code>{m.upstream}</code>
        </td>
        <td>
          {caps || "—"}
          {m.tools !== "native" && <div class="muted">tools {m.tools}</div>}
        </td>
        <td>{m.priced ? "yes" : <span class="warn-text">no price</span>}</td>
        <td>
          <div class="actions">
            <button type="button" disabled={act.busy} onClick={() => void act.run(() => api().testModel(m.name)).then((t) => { if (t) { setTest(t); onChange(); } })}>
              {act.busy ? "Testing…" : "Test"}
            </button>
            <button type="button" aria-expanded={editing} onClick={() => setEditing(!editing)}>
              Edit
            </button>
            <ConfirmButton label="Delete" question={`Delete model ${m.name}?`} confirmLabel="Delete model" disabled={act.busy} onConfirm={() => void act.run(() => api().deleteModel(m.name)).then(onChange)} />
          </div>
        </td>
      </tr>
      {editing && (
        <tr class="editing">
          <td colSpan={6}>
            <EditModel m={m} providers={providers} existing={names} onCancel={() => setEditing(false)} onDone={() => { setEditing(false); onChange(); }} />
          </td>
        </tr>
      )}
    </>
  );
}

export function Providers(_: { args: string[] }) {
  const providers = useLoad(() => api().providers());
  const models = useLoad(() => api().models());
  const [adding, setAdding] = useState<"provider" | "model" | undefined>();
  const reload = () => {
    providers.reload();
    models.reload();
  };
  const names = providers.data?.map((p) => p.name) ?? [];
  const modelNames = models.data?.map((m) => m.name) ?? [];
  return (
    <>
      <div class="toolbar">
        <button type="button" aria-expanded={adding === "provider"} onClick={() => setAdding(adding === "provider" ? undefined : "provider")}>
          Add provider
        </button>
        <button type="button" aria-expanded={adding === "model"} disabled={names.length === 0} onClick={() => setAdding(adding === "model" ? undefined : "model")}>
          Add model
        </button>
      </div>
      {adding === "provider" && <AddProvider existing={names} onDone={() => { setAdding(undefined); reload(); }} />}
      {adding === "model" && <AddModel providers={names} existing={modelNames} onDone={() => { setAdding(undefined); reload(); }} />}
      <h2>Providers</h2>
      <View res={providers}>
        {(ps) =>
          ps.length === 0 ? (
            <Empty title="No providers yet.">
              <p>Choose “Add provider” and pick a preset (OpenAI, Anthropic, DeepSeek, Ollama, …), then set its key and add a model.</p>
            </Empty>
          ) : (
            <ul class="cards">
              {ps.map((p) => (
                <ProviderRow key={p.name} p={p} names={names} onChange={reload} />
              ))}
            </ul>
          )
        }
      </View>
      <h2>Models</h2>
      <View res={models}>
        {(ms) =>
          ms.length === 0 ? (
            <Empty title="No models yet.">
              <p>{names.length ? "Choose “Add model” to name a model clients can ask for." : "Add a provider first, then a model on it."}</p>
            </Empty>
          ) : (
            <table class="table">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Provider</th>
                  <th scope="col">Upstream</th>
                  <th scope="col">Capabilities</th>
                  <th scope="col">Priced</th>
                  <th scope="col">
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {ms.map((m) => (
                  <ModelRow key={m.name} m={m} providers={names} names={modelNames} onChange={reload} />
                ))}
              </tbody>
            </table>
          )
        }
      </View>
    </>
  );
}
