// Shared view pieces: data loading with loading/error states, notices, empty states.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { EngineError } from "./ipc";

export interface Loaded<T> {
  data: T | undefined;
  error: EngineError | undefined;
  loading: boolean;
  reload: () => void;
}

export function toEngineError(e: unknown): EngineError {
  return e instanceof EngineError ? e : new EngineError("internal", e instanceof Error ? e.message : String(e));
}

/** Runs `load` on mount and whenever `deps` change; `reload()` runs it again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): Loaded<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<EngineError>();
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const latest = useRef(0);
  useEffect(() => {
    const id = ++latest.current;
    setLoading(true);
    load().then(
      (d) => {
        if (id !== latest.current) return;
        setData(d);
        setError(undefined);
        setLoading(false);
      },
      (e: unknown) => {
        if (id !== latest.current) return;
        setError(toEngineError(e));
        setLoading(false);
      },
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload };
}

/** Wraps an action: `busy` while it runs, its error kept for display. */
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<EngineError>();
  const run = useCallback(async <T,>(f: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true);
    setError(undefined);
    try {
      return await f();
    } catch (e) {
      setError(toEngineError(e));
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, clear: () => setError(undefined) };
}

export function ErrorNotice({ error, onRetry }: { error: EngineError; onRetry?: () => void }) {
  const hint =
    error.kind === "unauthorized" || error.status === 401
      ? "This browser has no dashboard session (or it ended). Run `keyhaven dashboard` and open the link it prints."
      : error.kind === "network"
        ? "Is Keyhaven running? Start it with `keyhaven` and try again."
        : undefined;
  return (
    <div class="notice error" role="alert">
      <strong>Error{error.kind ? ` (${error.kind})` : ""}:</strong> {error.message}
      {hint && <p>{hint}</p>}
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Retry
        </button>
      )}
    </div>
  );
}

export function Loading({ what = "Loading" }: { what?: string }) {
  return (
    <p class="muted" role="status" aria-live="polite">
      {what}…
    </p>
  );
}

export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="empty">
      <p>
        <strong>{title}</strong>
      </p>
      {children}
    </div>
  );
}

/** Loading / error / content for one `useLoad`. */
export function View<T>({ res, children }: { res: Loaded<T>; children: (data: T) => ComponentChildren }) {
  if (res.error && res.data === undefined) return <ErrorNotice error={res.error} onRetry={res.reload} />;
  if (res.data === undefined) return <Loading />;
  return (
    <>
      {res.error && <ErrorNotice error={res.error} onRetry={res.reload} />}
      {children(res.data)}
    </>
  );
}

export function Field({ label, id, error, hint, children }: { label: string; id: string; error?: string; hint?: string; children: ComponentChildren }) {
  return (
    <div class={`field${error ? " invalid" : ""}`}>
      <label for={id}>{label}</label>
      {children}
      {hint && !error && (
        <small id={`${id}-hint`} class="muted">
          {hint}
        </small>
      )}
      {error && (
        <small id={`${id}-error`} class="field-error" role="alert">
          {error}
        </small>
      )}
    </div>
  );
}

export function Stat({ label, value, sub }: { label: string; value: string; sub?: string }) {
  return (
    <div class="stat">
      <div class="stat-label">{label}</div>
      <div class="stat-value">{value}</div>
      {sub && <div class="stat-sub muted">{sub}</div>}
    </div>
  );
}

/** Copies text: the async clipboard API, else a hidden textarea and `execCommand`. */
export async function copyText(text: string): Promise<boolean> {
  try {
    if (navigator.clipboard?.writeText) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // fall through to the old way (no permission, not a secure context)
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

/** A button that copies `get()`'s text and says whether it worked. */
export function CopyButton({ label = "Copy", get, disabled }: { label?: string; get: () => Promise<string> | string; disabled?: boolean }) {
  const [state, setState] = useState<"idle" | "copied" | "failed">("idle");
  const act = useAction();
  const click = async () => {
    const text = await act.run(async () => get());
    if (text === undefined) return;
    setState((await copyText(text)) ? "copied" : "failed");
  };
  return (
    <>
      <button type="button" disabled={disabled || act.busy} onClick={() => void click()}>
        {label}
      </button>
      <span role="status" aria-live="polite" class="muted">
        {state === "copied" ? "Copied." : state === "failed" ? "Could not copy: select the text and copy it by hand." : ""}
      </span>
      {act.error && <ErrorNotice error={act.error} />}
    </>
  );
}

/** A destructive action behind an inline "are you sure" (keyboard-friendly, no modal). */
export function ConfirmButton({ label, question, confirmLabel, onConfirm, disabled }: { label: string; question: string; confirmLabel?: string; onConfirm: () => void; disabled?: boolean }) {
  const [asking, setAsking] = useState(false);
  const yes = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (asking) yes.current?.focus();
  }, [asking]);
  if (!asking)
    return (
      <button type="button" class="danger" disabled={disabled} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  return (
    <span class="confirm" role="group" aria-label={question}>
      <span>{question}</span>
      <button
        type="button"
        class="danger"
        ref={yes}
        disabled={disabled}
        onClick={() => {
          setAsking(false);
          onConfirm();
        }}
      >
        {confirmLabel ?? label}
      </button>
      <button type="button" onClick={() => setAsking(false)} onKeyDown={(e) => e.key === "Escape" && setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

/** Hands `text` to the browser as a file download (a Blob behind a temporary link). */
export function saveFile(name: string, text: string, type = "text/csv;charset=utf-8"): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** A "Download CSV" button: fetches the export, then saves it under `name`. */
export function DownloadButton({ load, name, label = "Download CSV" }: { load: () => Promise<string>; name: () => string; label?: string }) {
  const act = useAction();
  return (
    <span class="download">
      <button
        type="button"
        disabled={act.busy}
        onClick={() =>
          void act.run(async () => {
            const text = await load();
            saveFile(name(), text);
          })
        }
      >
        {act.busy ? "Preparing…" : label}
      </button>
      {act.error && <span class="warn-text"> {act.error.message}</span>}
    </span>
  );
}
