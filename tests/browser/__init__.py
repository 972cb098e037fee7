"""The pages and the JavaScript client in Debian's Chromium, driven by Playwright."""
