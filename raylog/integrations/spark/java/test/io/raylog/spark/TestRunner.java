package io.raylog.spark;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * Runs the connector's unit tests (no JUnit on the classpath): every public static void
 * method without parameters whose name starts with {@code test}, in the classes below. Prints
 * one line per test and a summary; exits with status 1 if any test failed.
 */
public final class TestRunner {
  private static final Class<?>[] CLASSES = {
    OffsetsJsonTest.class,
    RaylogOptionsTest.class,
    RangePlannerTest.class,
    KafkaSchemaTest.class,
    CountPartitionTest.class,
    SourceOffsetTest.class,
    BatchDecoderTest.class,
    AvroTypesTest.class,
    AvroDecoderTest.class,
    RaylogExceptionTest.class,
    TieredSplitTest.class,
  };

  private TestRunner() {}

  public static void main(String[] args) {
    quietLogs();
    int passed = 0;
    List<String> failed = new ArrayList<>();
    long began = System.nanoTime();
    for (Class<?> type : CLASSES) {
      List<Method> tests = tests(type);
      if (tests.isEmpty()) {
        failed.add(type.getSimpleName());
        System.out.println("FAIL " + type.getSimpleName() + ": no test methods found");
      }
      for (Method test : tests) {
        String name = type.getSimpleName() + "." + test.getName();
        Throwable error = run(test);
        if (error == null) {
          passed++;
          System.out.println("ok   " + name);
        } else {
          failed.add(name);
          System.out.println("FAIL " + name + ": " + describe(error, type));
        }
      }
    }
    long millis = (System.nanoTime() - began) / 1_000_000;
    System.out.println((passed + failed.size()) + " tests: " + passed + " passed, "
        + failed.size() + " failed (" + millis + " ms)");
    if (!failed.isEmpty()) {
      System.out.println("failed: " + String.join(", ", failed));
    }
    System.exit(failed.isEmpty() ? 0 : 1);
  }

  /** Only errors logged (the planner's warnings about clamped offsets are what some tests
   * provoke, and they would bury the results), unless -Draylog.test.verbose is given. Done by
   * reflection: log4j2 is Spark's, not something the tests compile against. */
  private static void quietLogs() {
    if (System.getProperty("raylog.test.verbose") != null) {
      return;
    }
    try {
      Class<?> level = Class.forName("org.apache.logging.log4j.Level");
      Class.forName("org.apache.logging.log4j.core.config.Configurator")
          .getMethod("setAllLevels", String.class, level)
          .invoke(null, "", level.getField("ERROR").get(null));
    } catch (ReflectiveOperationException | LinkageError e) {
      System.out.println("(logs not quietened: " + e + ")");
    }
  }

  /** The tests of {@code type}, by name (reflection's order is unspecified). */
  private static List<Method> tests(Class<?> type) {
    List<Method> out = new ArrayList<>();
    for (Method m : type.getDeclaredMethods()) {
      int mods = m.getModifiers();
      if (m.getName().startsWith("test") && Modifier.isPublic(mods) && Modifier.isStatic(mods)
          && m.getReturnType() == void.class && m.getParameterCount() == 0) {
        out.add(m);
      }
    }
    out.sort(Comparator.comparing(Method::getName));
    return out;
  }

  private static Throwable run(Method test) {
    try {
      test.invoke(null);
      return null;
    } catch (InvocationTargetException e) {
      return e.getCause();
    } catch (ReflectiveOperationException | RuntimeException e) {
      return e;
    }
  }

  /** The failure's message (with its type unless a failed assertion) and the line of the test
   * class where it happened. */
  private static String describe(Throwable error, Class<?> type) {
    String text = error instanceof AssertionError && error.getMessage() != null
        ? error.getMessage() : error.toString();
    if (error.getCause() != null) {
      text += " [caused by " + error.getCause() + "]";
    }
    for (StackTraceElement frame : error.getStackTrace()) {
      if (frame.getClassName().startsWith(type.getName())) {
        text += " (at " + frame.getFileName() + ":" + frame.getLineNumber() + ")";
        break;
      }
    }
    return text.replace('\n', ' ');
  }
}
