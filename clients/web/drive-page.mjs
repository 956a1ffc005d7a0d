// Drives the page in headless Chromium for tools/checks/web_check.py: reads a job from standard input
// ({url, chromium, lines, beam, runs, screenshot}), types the lines into the page, presses
// Translate `runs` times and prints, as JSON, each run's outputs, tokens and seconds.

import fs from "node:fs";

import puppeteer from "puppeteer-core";

const job = JSON.parse(fs.readFileSync(0, "utf8"));
const browser = await puppeteer.launch({ executablePath: job.chromium, headless: true,
  args: ["--no-sandbox", "--headless=new"] });
try {
  const page = await browser.newPage();
  const console = [];
  page.on("console", (m) => console.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => console.push(`pageerror: ${e.message}`));
  await page.setViewport({ width: 1280, height: 640 });
  await page.goto(job.url);
  const settled = (states) => page.waitForFunction((s) => s.includes(document.body.dataset.state), { timeout: 0 },
    states);
  await settled(["ready", "error"]);
  const status = () => page.$eval("#status", (e) => e.textContent);
  if (await page.evaluate(() => document.body.dataset.state) === "error") {
    throw new Error(`the page did not load: ${await status()}\n${console.join("\n")}`);
  }
  await page.$eval("#beam", (e, beam) => { e.value = String(beam); }, job.beam);
  await page.type("#source", job.lines.join("\n"));
  const runs = [];
  for (let i = 0; i < job.runs; i++) {
    await page.click("#translate");
    await settled(["done", "error"]);
    runs.push(await page.evaluate(() => ({ ...window.tfspecResult, output: document.getElementById("output").value })));
    if (runs.at(-1).error) break;
  }
  if (job.screenshot) {
    await page.$$eval("textarea", (areas) => areas.forEach((a) => { a.scrollTop = 0; }));
    await page.screenshot({ path: job.screenshot });
  }
  process.stdout.write(JSON.stringify({ status: await status(), runs, console }));
} finally {
  await browser.close();
}
