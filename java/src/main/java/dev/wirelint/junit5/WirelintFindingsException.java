package dev.wirelint.junit5;

/** Thrown at the end of a run whose wirelint findings reached {@code wirelint.failOn}. */
public final class WirelintFindingsException extends AssertionError {
  private static final long serialVersionUID = 1L;

  WirelintFindingsException(String message) {
    super(message);
  }
}
