import { render } from "preact";
import { App } from "./app";
import { createApi, defaultTransport, setApi } from "./ipc";
import "./style.css";

// IPC in the Tauri window (`window.__TAURI__`), HTTP with the session cookie in a browser.
setApi(createApi(defaultTransport()));
render(<App />, document.getElementById("app")!);
