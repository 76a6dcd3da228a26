"""Independent numpy references for the DSL and operator tests."""
