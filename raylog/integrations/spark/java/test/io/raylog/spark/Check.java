package io.raylog.spark;

import java.util.Objects;

/** Assertions for the tests: each failure is an AssertionError whose message says why. */
final class Check {
  private Check() {}

  /** A block of test code that may throw anything. */
  @FunctionalInterface
  interface Body {
    void run() throws Throwable;
  }

  static void fail(String message) {
    throw new AssertionError(message);
  }

  static void assertEquals(Object expected, Object actual) {
    assertEquals(expected, actual, null);
  }

  static void assertEquals(Object expected, Object actual, String what) {
    if (!Objects.equals(expected, actual)) {
      String shown = "expected <" + expected + "> but was <" + actual + ">";
      if (String.valueOf(expected).equals(String.valueOf(actual))) {
        // Same text, different types (say Integer 5 and Long 5): say so.
        shown += " (" + typeOf(expected) + " vs " + typeOf(actual) + ")";
      }
      fail(what == null ? shown : what + ": " + shown);
    }
  }

  static void assertTrue(boolean condition, String message) {
    if (!condition) {
      fail(message);
    }
  }

  static void assertFalse(boolean condition, String message) {
    assertTrue(!condition, message);
  }

  static void assertContains(String text, String fragment) {
    if (text == null || !text.contains(fragment)) {
      fail("expected text containing <" + fragment + "> but was <" + text + ">");
    }
  }

  /**
   * Runs {@code body}, which must throw a {@code type} whose message contains
   * {@code fragment} (unless it is null); returns what was thrown.
   */
  static <T extends Throwable> T assertThrows(Class<T> type, Body body, String fragment) {
    try {
      body.run();
    } catch (Throwable t) {
      if (!type.isInstance(t)) {
        AssertionError e = new AssertionError("expected " + type.getSimpleName()
            + " but " + t + " was thrown");
        e.initCause(t);
        throw e;
      }
      if (fragment != null && (t.getMessage() == null || !t.getMessage().contains(fragment))) {
        fail("expected a " + type.getSimpleName() + " whose message contains <" + fragment
            + "> but its message was <" + t.getMessage() + ">");
      }
      return type.cast(t);
    }
    throw new AssertionError("expected " + type.getSimpleName() + (fragment == null ? ""
        : " containing <" + fragment + ">") + " but nothing was thrown");
  }

  /** As {@link #assertThrows}, but the message is matched ignoring case (option names are
   * case-insensitive, and how a message spells one is no behaviour to pin down). */
  static <T extends Throwable> T assertThrowsIgnoringCase(
      Class<T> type, Body body, String fragment) {
    T thrown = assertThrows(type, body, null);
    String message = String.valueOf(thrown.getMessage()).toLowerCase(java.util.Locale.ROOT);
    if (!message.contains(fragment.toLowerCase(java.util.Locale.ROOT))) {
      fail("expected a " + type.getSimpleName() + " whose message contains <" + fragment
          + "> (ignoring case) but its message was <" + thrown.getMessage() + ">");
    }
    return thrown;
  }

  private static String typeOf(Object o) {
    return o == null ? "null" : o.getClass().getSimpleName();
  }
}
