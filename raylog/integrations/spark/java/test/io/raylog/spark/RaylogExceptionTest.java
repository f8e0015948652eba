package io.raylog.spark;

import static io.raylog.spark.Check.assertEquals;
import static io.raylog.spark.Check.assertFalse;
import static io.raylog.spark.Check.assertTrue;

/** How the connector reads a failed call into raylog's Python actors. */
public final class RaylogExceptionTest {
  private RaylogExceptionTest() {}

  /** The text a Python actor's raylog error leaves in Ray's exception (raylog/util/interop.py). */
  private static RuntimeException fromPython(String type, boolean retriable) {
    return new RuntimeException("ray task failed\n" + RaylogException.MARK + "{\"type\": \""
        + type + "\", \"retriable\": " + retriable + ", \"message\": \"t-0: not yet\"}"
        + RaylogException.MARK + "\ntraceback");
  }

  public static void testANewLeadersOffsetNotAvailableIsRetriable() {
    // A new leader that does not know yet where committed records end (KIP-207): readers
    // ask again with fresh metadata instead of failing the query.
    RaylogException e = RaylogException.of(fromPython("OffsetNotAvailableError", true));
    assertEquals("OffsetNotAvailableError", e.type);
    assertTrue(e.retriable, "OffsetNotAvailableError must be retried");
    assertEquals("t-0: not yet", e.getMessage());
    assertTrue(e.getCause() != null, "the Ray exception stays the cause");
  }

  public static void testRetriableIsWhatPythonSays() {
    assertFalse(RaylogException.of(fromPython("OffsetOutOfRangeError", false)).retriable,
        "an error Python does not mark retriable is not retried");
  }
}
