"""The on-call pages (DESIGN §8): views, their forms, and how chains read on a page."""
