import { useEffect, useRef, useState } from "preact/hooks";
import { api, inApp, type AppStatus, type Settings, type SettingsApplied } from "../ipc";
import { ErrorNotice, Field, View, useAction, useLoad } from "../ui";
import { DoctorSection } from "./doctor";
import { WebToolsSection } from "./web";

interface Form {
  listen: string;
  proxyListen: string;
  proxyEnabled: boolean;
  captureBodies: boolean;
  bodyCaptureLimit: string;
  retentionDays: string;
  restoreOnStop: boolean;
}

const toForm = (s: Settings): Form => ({
  listen: s.listen,
  proxyListen: s.proxyListen,
  proxyEnabled: s.proxyEnabled,
  captureBodies: s.captureBodies,
  bodyCaptureLimit: String(s.bodyCaptureLimit),
  retentionDays: String(s.retentionDays),
  restoreOnStop: s.restoreOnStop,
});

const ADDR_RE = /^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$/;

function validate(f: Form): Partial<Record<keyof Form, string>> {
  const e: Partial<Record<keyof Form, string>> = {};
  if (!ADDR_RE.test(f.listen.trim())) e.listen = "host:port, e.g. 127.0.0.1:4937";
  if (!ADDR_RE.test(f.proxyListen.trim())) e.proxyListen = "host:port, e.g. 127.0.0.1:4938";
  if (!/^\d+$/.test(f.bodyCaptureLimit.trim())) e.bodyCaptureLimit = "A whole number of bytes.";
  if (!/^\d+$/.test(f.retentionDays.trim())) e.retentionDays = "A whole number of days (0 keeps everything).";
  return e;
}

function SettingsForm({ s, onSaved }: { s: Settings; onSaved: () => void }) {
  const [form, setForm] = useState(toForm(s));
  const [applied, setApplied] = useState<SettingsApplied>();
  // Only a later `s` replaces the form (see web.tsx: a mount effect could undo a first edit).
  const shown = useRef(s);
  useEffect(() => {
    if (shown.current === s) return;
    shown.current = s;
    setForm(toForm(s));
  }, [s]);
  const act = useAction();
  const errors = validate(form);
  const text = (k: "listen" | "proxyListen" | "bodyCaptureLimit" | "retentionDays", label: string, hint: string) => (
    <Field label={label} id={`s-${k}`} error={errors[k]} hint={hint}>
      <input id={`s-${k}`} value={form[k]} onInput={(e) => setForm({ ...form, [k]: e.currentTarget.value })} aria-invalid={!!errors[k]} />
    </Field>
  );
  const submit = async (e: Event) => {
    e.preventDefault();
    if (Object.keys(errors).length) return;
    const r = await act.run(() =>
      api().setSettings({
        listen: form.listen.trim(),
        proxyListen: form.proxyListen.trim(),
        proxyEnabled: form.proxyEnabled,
        captureBodies: form.captureBodies,
        bodyCaptureLimit: Number(form.bodyCaptureLimit),
        retentionDays: Number(form.retentionDays),
        restoreOnStop: form.restoreOnStop,
      }),
    );
    if (r) {
      setApplied(r);
      onSaved();
    }
  };
  return (
    <form class="panel" onSubmit={submit} noValidate>
      {text("listen", "Gateway address", "Restart to apply.")}
      {text("proxyListen", "Proxy address", "Restart to apply.")}
      <label class="check">
        <input type="checkbox" checked={form.proxyEnabled} onChange={(e) => setForm({ ...form, proxyEnabled: e.currentTarget.checked })} /> Run the intercepting proxy (for Cursor; restart to apply)
      </label>
      <label class="check">
        <input type="checkbox" checked={form.captureBodies} onChange={(e) => setForm({ ...form, captureBodies: e.currentTarget.checked })} /> Keep request and response bodies in the call history (restart to apply)
      </label>
      <label class="check">
        <input
          type="checkbox"
          id="s-restoreOnStop"
          checked={form.restoreOnStop}
          onChange={(e) => setForm({ ...form, restoreOnStop: e.currentTarget.checked })}
        />{" "}
        Restore clients on stop: when Keyhaven stops or quits, put every client it routed back as it was, so none is left pointing at a closed port
      </label>
      {text("bodyCaptureLimit", "Bytes kept per body", "Restart to apply.")}
      {text("retentionDays", "Keep calls for (days)", "0 keeps everything; applies right away. Usage totals are kept regardless.")}
      <Field label="Web UI directory" id="s-uiDir" hint="Set as [server] ui_dir in config.toml only (it is served without a token, so it cannot be changed from here).">
        <input id="s-uiDir" value={s.uiDir ?? ""} readOnly />
      </Field>
      <Field label="Data directory" id="s-data" hint="Set with --data-dir on the command line.">
        <input id="s-data" value={s.dataDir} readOnly />
      </Field>
      <div class="actions">
        <button type="submit" class="primary" disabled={act.busy}>
          Save
        </button>
      </div>
      {act.error && <ErrorNotice error={act.error} />}
      {applied && (
        <div class="notice ok" role="status">
          Saved.
          {applied.restartRequired.length > 0 && <> Restart Keyhaven to apply: {applied.restartRequired.join(", ")}.</>}
        </div>
      )}
    </form>
  );
}

/** The app window only: start on login is the tray app's, applied at once (not in the config file). */
function StartOnLogin() {
  const [status, setStatus] = useState<AppStatus>();
  const act = useAction();
  useEffect(() => {
    api().app().then(setStatus, () => undefined);
  }, []);
  if (!status || status.startOnLogin === null) return null;
  const toggle = async (on: boolean) => {
    const s = await act.run(() => api().setApp({ startOnLogin: on }));
    if (s) setStatus(s);
  };
  return (
    <div class="panel">
      <label class="check">
        <input type="checkbox" id="s-startOnLogin" checked={status.startOnLogin} disabled={act.busy} onChange={(e) => toggle(e.currentTarget.checked)} /> Start
        Keyhaven when I log in (in the tray, without opening this window)
      </label>
      {act.error && <ErrorNotice error={act.error} />}
    </div>
  );
}

export function SettingsPage(_: { args: string[] }) {
  const res = useLoad(() => api().settings());
  const web = useLoad(() => api().web());
  return (
    <>
      {inApp() && <StartOnLogin />}
      <View res={res}>{(s) => <SettingsForm s={s} onSaved={res.reload} />}</View>
      <View res={web}>{(w) => <WebToolsSection initial={w} />}</View>
      <DoctorSection />
    </>
  );
}
