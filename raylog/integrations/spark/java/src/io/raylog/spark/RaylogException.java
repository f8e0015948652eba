package io.raylog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import io.ray.api.exception.RayActorException;
import io.ray.api.exception.RayTimeoutException;

/**
 * A failure of a call into raylog's Python actors, with the name of raylog's error type and
 * whether the call may succeed if tried again (after fresh metadata, or a moment). Errors cross
 * from Python as a marked JSON object inside the exception's text (raylog/util/interop.py).
 */
public class RaylogException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  static final String MARK = "@@raylog-error@@";
  /** The type of a failure because the actor called is gone or restarting. */
  public static final String ACTOR_LOST = "ActorUnavailable";

  public final String type;
  public final boolean retriable;

  public RaylogException(String type, String message, boolean retriable, Throwable cause) {
    super(message, cause);
    this.type = type;
    this.retriable = retriable;
  }

  /** A raylog error as a JSON object {@code {"type", "retriable", "message"}}. */
  static RaylogException fromJson(JsonNode error) {
    return fromJson(error, null);
  }

  private static RaylogException fromJson(JsonNode error, Throwable cause) {
    return new RaylogException(error.path("type").asText("RaylogError"),
        error.path("message").asText(""), error.path("retriable").asBoolean(false), cause);
  }

  /** What a failed Ray call means: raylog's error if the text carries one; a dead or
   * restarting actor and a timeout are worth retrying; anything else is not. */
  public static RaylogException of(Throwable t) {
    if (t instanceof RaylogException) {
      return (RaylogException) t;
    }
    for (Throwable c = t; c != null; c = c.getCause()) {
      String text = String.valueOf(c.getMessage());
      int at = text.indexOf(MARK);
      int end = at < 0 ? -1 : text.indexOf(MARK, at + MARK.length());
      if (end > at) {
        try {
          // The cause goes in the constructor: a Throwable made with a (null) cause
          // refuses initCause, which would turn every raylog error into an
          // IllegalStateException that no reader retries.
          return fromJson(OffsetsJson.MAPPER.readTree(text.substring(at + MARK.length(), end)),
              t);
        } catch (java.io.IOException ignored) {
          break;
        }
      }
    }
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof RayActorException) {
        return new RaylogException(ACTOR_LOST, "a raylog actor is gone or restarting: "
            + firstLine(c), true, t);
      }
      if (c instanceof RayTimeoutException) {
        return new RaylogException("Timeout", "a raylog actor did not answer in time", true, t);
      }
    }
    return new RaylogException(t.getClass().getSimpleName(), firstLine(t), false, t);
  }

  private static String firstLine(Throwable t) {
    String text = String.valueOf(t.getMessage());
    int newline = text.indexOf('\n');
    return newline < 0 ? text : text.substring(0, newline);
  }

  @Override
  public String toString() {
    return "raylog " + type + ": " + getMessage();
  }
}
