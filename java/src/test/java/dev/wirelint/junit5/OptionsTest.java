package dev.wirelint.junit5;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtensionConfigurationException;

class OptionsTest {
  @Test
  void defaults() {
    Options o = Options.of(Map.of(), Map.of());
    assertTrue(o.enabled);
    assertNull(o.upstream);
    assertNull(o.failOn);
    assertEquals(List.of("spring.mongodb.uri", "spring.data.mongodb.uri"), o.repointed());
  }

  @Test
  void the_upstream_comes_from_the_option_then_the_environment() {
    assertEquals(
        "mongodb://a/",
        Options.of(Map.of("wirelint.upstream", "mongodb://a/"), Map.of("WIRELINT_UPSTREAM", "mongodb://b/")).upstream);
    assertEquals("mongodb://b/", Options.of(Map.of(), Map.of("WIRELINT_UPSTREAM", "mongodb://b/")).upstream);
    Options env = Options.of(Map.of("wirelint.env", "MONGODB_URI"), Map.of("MONGODB_URI", "mongodb://c/"));
    assertEquals("mongodb://c/", env.upstream);
    assertEquals(List.of("spring.mongodb.uri", "spring.data.mongodb.uri", "MONGODB_URI"), env.repointed());
  }

  @Test
  void the_properties_to_repoint() {
    assertEquals(List.of("app.mongo", "x"), Options.of(Map.of("wirelint.properties", "app.mongo, x"), Map.of()).repointed());
    assertEquals(List.of(), Options.of(Map.of("wirelint.properties", "none"), Map.of()).repointed());
  }

  @Test
  void a_bad_level_names_the_option_and_the_levels() {
    ExtensionConfigurationException e =
        assertThrows(ExtensionConfigurationException.class, () -> Options.of(Map.of("wirelint.failOn", "sometimes"), Map.of()));
    assertEquals("wirelint: wirelint.failOn must be one of info, warning, error, not \"sometimes\"", e.getMessage());
  }

  @Test
  void an_unknown_option_is_named_with_the_known_ones() {
    ExtensionConfigurationException e =
        assertThrows(ExtensionConfigurationException.class, () -> Options.of(Map.of("wirelint.fail_on", "warning"), Map.of()));
    assertTrue(e.getMessage().startsWith("wirelint: unknown option wirelint.fail_on; the options are wirelint.enabled=true|false,"), e.getMessage());
    assertTrue(e.getMessage().contains("wirelint.failOn=info|warning|error"), e.getMessage());
  }

  @Test
  void a_bad_boolean_names_the_option() {
    ExtensionConfigurationException e =
        assertThrows(ExtensionConfigurationException.class, () -> Options.of(Map.of("wirelint.showValues", "yes"), Map.of()));
    assertEquals("wirelint: wirelint.showValues must be true or false, not \"yes\"", e.getMessage());
  }

  @Test
  void an_unset_variable_named_by_wirelint_env_stops_the_run_naming_it() {
    ExtensionConfigurationException e =
        assertThrows(ExtensionConfigurationException.class, () -> Options.of(Map.of("wirelint.env", "MONGODB_URI"), Map.of()));
    assertTrue(e.getMessage().startsWith("wirelint: wirelint.env names MONGODB_URI, which is not set"), e.getMessage());
    // Switched off, it stops nothing.
    Options.of(Map.of("wirelint.env", "MONGODB_URI", "wirelint.enabled", "false"), Map.of());
  }

  @Test
  void the_container_and_its_image() {
    assertFalse(Options.of(Map.of(), Map.of()).container);
    Options o = Options.of(Map.of("wirelint.container", "true", "wirelint.image", "wirelint:dev"), Map.of());
    assertTrue(o.container);
    assertEquals("wirelint:dev", o.image);
    assertNull(Options.of(Map.of("wirelint.container", "true"), Map.of()).image);
    ExtensionConfigurationException e =
        assertThrows(ExtensionConfigurationException.class, () -> Options.of(Map.of("wirelint.image", "wirelint:dev"), Map.of()));
    assertTrue(e.getMessage().startsWith("wirelint: wirelint.image names the image to run with wirelint.container=true, which is not set"), e.getMessage());
  }
}
