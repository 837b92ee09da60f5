// zoo serve's page: lists the served models from /page/models and lets a person try each one.
// Text from the server goes in through textContent; only card_html (sanitized by the server) is HTML.
"use strict";

const apiKey = { value: sessionStorage.getItem("zoo-api-key") || "" };

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (apiKey.value) headers.Authorization = `Bearer ${apiKey.value}`;
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    document.getElementById("key-form").hidden = false;
    throw new Error("this server needs an API key: enter it above");
  }
  if (!response.ok) throw new Error(await errorMessage(response));
  return response;
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    return typeof body.error === "string" ? body.error : body.error.message;
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

async function authorizedImage(image) {
  // an <img> can't send the API key, so protected PNGs come through fetch as blob URLs
  const source = image.getAttribute("src");
  if (!source || !source.startsWith("/page/")) return;
  image.removeAttribute("src");
  try {
    const response = await api(source);
    image.src = URL.createObjectURL(await response.blob());
  } catch (error) {
    image.alt = `${image.alt} (${error.message})`;
  }
}

function metricsTable(metrics) {
  const rows = [];
  for (const [task, values] of Object.entries(metrics || {})) {
    if (values !== null && typeof values === "object") {
      for (const [metric, value] of Object.entries(values)) rows.push([task, metric, value]);
    } else rows.push([task, "", values]);
  }
  if (!rows.length) return element("p", { class: "kind", text: "no metrics recorded" });
  const body = rows.map(([task, metric, value]) =>
    element("tr", {}, element("td", { text: task }), element("td", { text: metric }), element("td", { text: String(value) })));
  return element("table", { class: "metrics" },
    element("thead", {}, element("tr", {}, element("th", { text: "evaluation" }), element("th", { text: "metric" }),
      element("th", { text: "value" }))), element("tbody", {}, ...body));
}

function bars(classes) {
  const list = element("ol", { class: "bars" });
  for (const c of classes) {
    const bar = element("span", { class: "bar" });
    bar.style.width = `${Math.max(0.5, c.score * 100).toFixed(1)}%`;
    list.append(element("li", { "data-label": c.label },
      element("span", { class: "label", text: c.label }), element("span", { class: "track" }, bar),
      element("span", { class: "score", text: `${(c.score * 100).toFixed(2)}%` })));
  }
  return list;
}

function imageBox(model) {
  const input = element("input", { type: "file", accept: "image/*" });
  const drop = element("label", { class: "drop" }, "Drop an image here, or pick one", input);
  const result = element("div", { class: "result", "aria-live": "polite" });
  async function classify(file) {
    result.replaceChildren(element("span", { class: "kind", text: "classifying…" }));
    const form = new FormData();
    form.append("image", file, file.name);
    try {
      const response = await api(`/v1/models/${encodeURIComponent(model.name)}:predict?top_k=5`, { method: "POST", body: form });
      const { predictions } = await response.json();
      const answer = predictions[0];
      const picture = element("img", { src: URL.createObjectURL(file), alt: file.name });
      if ("value" in answer) {  // a regression: the value in the target's units
        result.dataset.top = String(answer.value);
        result.replaceChildren(picture, element("p", { class: "value", text: `${answer.target || "value"}: ${answer.value}` }));
        return;
      }
      const classes = answer.classes || answer.labels;  // top classes, or the labels over their thresholds
      result.dataset.top = classes.length ? classes[0].label : "";
      result.replaceChildren(picture, classes.length ? bars(classes) : element("p", { text: "no label over its threshold" }));
    } catch (error) {
      result.replaceChildren(element("p", { class: "error", text: error.message }));
    }
  }
  input.addEventListener("change", () => input.files[0] && classify(input.files[0]));
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (event.dataTransfer.files[0]) classify(event.dataTransfer.files[0]);
  });
  return element("div", { class: "try" }, element("h3", { text: "Try it" }), drop, result);
}

function numberInput(label, attributes) {
  const input = element("input", { type: "number", ...attributes });
  return [element("label", {}, `${label} `, input), input];
}

function textBox(model) {
  const prompt = element("textarea", { rows: "3", spellcheck: "false" });
  prompt.value = "def fib(";
  const [tokensLabel, tokens] = numberInput("max tokens", { min: "1", max: "256", value: "120" });
  const [temperatureLabel, temperature] = numberInput("temperature", { min: "0", max: "2", step: "0.1", value: "0.8" });
  const button = element("button", { type: "button", text: "Generate" });
  const output = element("pre", { class: "output" });
  const status = element("p", { class: "kind stream-status", "aria-live": "polite" });
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.dataset.state = "streaming";
    status.textContent = "streaming…";
    output.replaceChildren(element("b", { text: prompt.value }));
    try {
      const finish = await streamCompletion(model.name, prompt.value, Number(tokens.value), Number(temperature.value),
        (text) => output.append(text));
      status.textContent = `done (${finish === "length" ? "max tokens reached" : "end of text"})`;
      status.dataset.state = "done";
    } catch (error) {
      status.textContent = error.message;
      status.dataset.state = "error";
      status.classList.add("error");
    } finally {
      button.disabled = false;
    }
  });
  return element("div", { class: "try" }, element("h3", { text: "Try it" }), prompt,
    element("div", { class: "controls" }, tokensLabel, temperatureLabel, button), output, status);
}

async function streamCompletion(model, prompt, maxTokens, temperature, onText) {
  const response = await api("/v1/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model, prompt, max_tokens: maxTokens, temperature, top_p: 0.95, stream: true }),
  });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "", finish = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const lines = buffer.slice(0, end).split("\n");
      buffer = buffer.slice(end + 2);
      const isError = lines.includes("event: error");
      const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (!data || data === "[DONE]") continue;
      const event = JSON.parse(data);
      if (isError) throw new Error(event.error.message);
      const choice = event.choices[0];
      if (choice.text) onText(choice.text);
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  return finish;
}

function vectorBox(model) {
  const rows = element("textarea", { rows: "3", spellcheck: "false", placeholder: `[[${model.input_shape.slice(1).join(", ")} numbers]]` });
  const button = element("button", { type: "button", text: "Classify" });
  const result = element("div", { class: "result" });
  button.addEventListener("click", async () => {
    try {
      const response = await api(`/v1/models/${encodeURIComponent(model.name)}:predict`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ instances: JSON.parse(rows.value), top_k: 5 }),
      });
      result.replaceChildren(bars((await response.json()).predictions[0].classes));
    } catch (error) {
      result.replaceChildren(element("p", { class: "error", text: error.message }));
    }
  });
  return element("div", { class: "try" }, element("h3", { text: "Try it (JSON rows)" }), rows,
    element("div", { class: "controls" }, button), result);
}

function modelSection(model) {
  const section = element("section", { class: "model", id: `model-${model.name}`, "data-model": model.name },
    element("h2", { text: model.name }), element("p", { class: "kind", text: model.description }), metricsTable(model.metrics));
  const tryIt = { images: imageBox, text: textBox, vectors: vectorBox }[model.kind];
  section.append(tryIt(model));
  for (const [role, source] of Object.entries(model.images)) {
    const image = element("img", { class: "curves", src: source, alt: role === "curves" ? "training curves" : role });
    authorizedImage(image);
    section.append(image);
  }
  if (model.card_html) {
    const card = element("div", { class: "card" });
    card.innerHTML = model.card_html;  // sanitized by the server (zoo/serve/routes/cards.py)
    card.querySelectorAll("img").forEach(authorizedImage);
    section.append(element("details", { class: "card-box" }, element("summary", { text: "Model card" }), card));
  }
  return section;
}

async function main() {
  const status = document.getElementById("status");
  try {
    const response = await api("/page/models");
    const { models } = await response.json();
    document.getElementById("models").replaceChildren(...models.map(modelSection));
    status.textContent = `${models.length} model${models.length === 1 ? "" : "s"} served`;
  } catch (error) {
    status.textContent = error.message;
    status.className = "error";
  }
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  apiKey.value = document.getElementById("key").value;
  sessionStorage.setItem("zoo-api-key", apiKey.value);
  document.getElementById("key-form").hidden = true;
  main();
});
main();
