"""The runtime probe (`gradlint probe`): not built yet, see issue 4."""
