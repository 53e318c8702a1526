"""A user package for `gradlint probe cli_pkg.train:step`, run from this directory."""
