package dev.wirelint.junit5;

import java.io.IOException;
import java.io.InputStream;
import java.net.URL;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeSet;
import java.util.function.Function;
import org.junit.jupiter.api.extension.ExtensionConfigurationException;

/**
 * The extension's options: JUnit configuration parameters, that is
 * {@code junit-platform.properties} on the test class path or system
 * properties ({@code mvn test -Dwirelint.failOn=warning}).
 */
final class Options {
  /** Severities in increasing order, as reports and {@code --fail-on} spell them. */
  static final List<String> SEVERITIES = List.of("info", "warning", "error");

  static final List<String> DEFAULT_PROPERTIES = List.of("spring.mongodb.uri", "spring.data.mongodb.uri");

  /** Every option, with what it takes (for the error naming an unknown one). */
  static final Map<String, String> KNOWN = new LinkedHashMap<>();

  static {
    KNOWN.put("wirelint.enabled", "true|false");
    KNOWN.put("wirelint.upstream", "URI");
    KNOWN.put("wirelint.env", "VAR");
    KNOWN.put("wirelint.properties", "NAME[,NAME…]|none");
    KNOWN.put("wirelint.failOn", String.join("|", SEVERITIES));
    KNOWN.put("wirelint.report", "FILE");
    KNOWN.put("wirelint.sarif", "FILE");
    KNOWN.put("wirelint.junit", "FILE");
    KNOWN.put("wirelint.config", "FILE");
    KNOWN.put("wirelint.showValues", "true|false");
    KNOWN.put("wirelint.binary", "FILE");
    KNOWN.put("wirelint.container", "true|false");
    KNOWN.put("wirelint.image", "IMAGE");
  }

  final boolean enabled;
  final String upstream;
  final String upstreamSource;
  final String env;
  final List<String> properties;
  final String failOn;
  final String report;
  final String sarif;
  final String junit;
  final String config;
  final boolean showValues;
  final String binary;
  final boolean container;
  final String image;

  private Options(Function<String, Optional<String>> lookup, Function<String, String> environment) {
    enabled = bool(lookup, "wirelint.enabled", true);
    env = value(lookup, "wirelint.env");
    String explicit = value(lookup, "wirelint.upstream");
    String fromEnvironment = blankToNull(environment.apply("WIRELINT_UPSTREAM"));
    if (explicit != null) {
      upstream = explicit;
      upstreamSource = "wirelint.upstream";
    } else if (fromEnvironment != null) {
      upstream = fromEnvironment;
      upstreamSource = "WIRELINT_UPSTREAM";
    } else if (env != null) {
      upstream = blankToNull(environment.apply(env));
      upstreamSource = "the environment variable " + env + " (wirelint.env)";
      if (upstream == null && enabled) {
        // Else the suite falls back to its default database and its tests
        // time out long after, saying nothing of the variable.
        throw bad(
            "wirelint.env names "
                + env
                + ", which is not set: set it to the test database's URI (or give wirelint.upstream). No test was"
                + " run");
      }
    } else {
      upstream = null;
      upstreamSource = null;
    }
    String names = value(lookup, "wirelint.properties");
    if (names == null) {
      properties = DEFAULT_PROPERTIES;
    } else if (names.equals("none")) {
      properties = List.of();
    } else {
      List<String> list = new ArrayList<>();
      for (String name : names.split(",")) {
        if (!name.isBlank()) {
          list.add(name.trim());
        }
      }
      properties = Collections.unmodifiableList(list);
    }
    failOn = value(lookup, "wirelint.failOn");
    if (failOn != null && !SEVERITIES.contains(failOn)) {
      throw bad("wirelint.failOn must be one of " + String.join(", ", SEVERITIES) + ", not \"" + failOn + "\"");
    }
    report = value(lookup, "wirelint.report");
    sarif = value(lookup, "wirelint.sarif");
    junit = value(lookup, "wirelint.junit");
    config = value(lookup, "wirelint.config");
    showValues = bool(lookup, "wirelint.showValues", false);
    binary = value(lookup, "wirelint.binary");
    container = bool(lookup, "wirelint.container", false);
    image = value(lookup, "wirelint.image");
    if (image != null && !container) {
      throw bad(
          "wirelint.image names the image to run with wirelint.container=true, which is not set: set it too (or"
              + " leave wirelint.image out)");
    }
  }

  /** The options as the test run has them; a bad one is an error naming it. */
  static Options read(Function<String, Optional<String>> lookup) {
    checkKnown();
    return new Options(lookup, System::getenv);
  }

  /** For tests: the options from these values alone. */
  static Options of(Map<String, String> values, Map<String, String> environment) {
    for (String key : values.keySet()) {
      checkKey(key);
    }
    return new Options(k -> Optional.ofNullable(values.get(k)), environment::get);
  }

  /** The variables set to wirelint's URI: the properties and wirelint.env's name. */
  List<String> repointed() {
    List<String> names = new ArrayList<>(properties);
    if (env != null && !names.contains(env)) {
      names.add(env);
    }
    return names;
  }

  private static String value(Function<String, Optional<String>> lookup, String key) {
    return lookup.apply(key).map(String::trim).filter(v -> !v.isEmpty()).orElse(null);
  }

  private static String blankToNull(String value) {
    return value == null || value.isBlank() ? null : value.trim();
  }

  private static boolean bool(Function<String, Optional<String>> lookup, String key, boolean otherwise) {
    String v = value(lookup, key);
    if (v == null) {
      return otherwise;
    }
    if (v.equals("true") || v.equals("false")) {
      return Boolean.parseBoolean(v);
    }
    throw bad(key + " must be true or false, not \"" + v + "\"");
  }

  /**
   * A misspelt option would be ignored without a word: every wirelint.* key
   * among the system properties and in junit-platform.properties must be
   * one of ours.
   */
  private static void checkKnown() {
    TreeSet<String> keys = new TreeSet<>();
    for (String key : System.getProperties().stringPropertyNames()) {
      keys.add(key);
    }
    ClassLoader loader = Thread.currentThread().getContextClassLoader();
    if (loader == null) {
      loader = Options.class.getClassLoader();
    }
    try {
      Enumeration<URL> files = loader.getResources("junit-platform.properties");
      while (files.hasMoreElements()) {
        Properties p = new Properties();
        try (InputStream in = files.nextElement().openStream()) {
          p.load(in);
        }
        keys.addAll(p.stringPropertyNames());
      }
    } catch (IOException e) {
      // Unreadable: JUnit reports it itself.
    }
    for (String key : keys) {
      checkKey(key);
    }
  }

  private static void checkKey(String key) {
    if (key.startsWith("wirelint.") && !KNOWN.containsKey(key)) {
      StringBuilder known = new StringBuilder();
      for (Map.Entry<String, String> e : KNOWN.entrySet()) {
        known.append(known.length() == 0 ? "" : ", ").append(e.getKey()).append('=').append(e.getValue());
      }
      throw bad("unknown option " + key + "; the options are " + known);
    }
  }

  static ExtensionConfigurationException bad(String message) {
    return new ExtensionConfigurationException("wirelint: " + message);
  }
}
