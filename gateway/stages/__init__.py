"""Request stages. Each is a small unit with one async entry point, `__call__(exchange)`;
they read and write the Exchange and never call each other."""
