"""gradlint's rules, one module each. Installed as `gradlint.rules`; the engine finds them by
scanning this package, so a new rule is one new file."""
