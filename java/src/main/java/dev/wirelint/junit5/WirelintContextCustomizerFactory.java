package dev.wirelint.junit5;

import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.core.annotation.MergedAnnotation;
import org.springframework.core.annotation.MergedAnnotations;
import org.springframework.core.annotation.MergedAnnotations.SearchStrategy;
import org.springframework.core.env.Environment;
import org.springframework.test.context.ContextConfigurationAttributes;
import org.springframework.test.context.ContextCustomizer;
import org.springframework.test.context.ContextCustomizerFactory;
import org.springframework.test.context.MergedContextConfiguration;

/**
 * Spring's test contexts, for a run with the wirelint extension (loaded by
 * Spring from {@code META-INF/spring.factories}; without Spring it is never
 * loaded).
 *
 * <p>Spring caches a test context by its configuration and reuses it for
 * every test class with the same one. A {@code @SpringBootTest} class
 * without the extension that runs first builds a context pointed straight
 * at the database; a class with the extension would reuse it, and
 * wirelint would see nothing. A class with the extension gets this
 * customizer, which is part of the cache key: such classes share contexts
 * among themselves, built after wirelint started, and never one built
 * without it. (Spring Boot's own key often tells such classes apart by
 * their annotations already; a plain Spring test's does not.) When the context is built, a repointed property that does
 * not hold wirelint's URI (set by the test's own configuration) is an
 * error naming the property and the class.
 */
public final class WirelintContextCustomizerFactory implements ContextCustomizerFactory {

  @Override
  public ContextCustomizer createContextCustomizer(
      Class<?> testClass, List<ContextConfigurationAttributes> configAttributes) {
    return usesExtension(testClass) ? new Customizer(testClass.getName()) : null;
  }

  /** Whether the class (or an enclosing one) has the extension, directly or by a meta-annotation. */
  static boolean usesExtension(Class<?> type) {
    for (Class<?> c = type; c != null; c = c.getEnclosingClass()) {
      boolean found =
          MergedAnnotations.from(c, SearchStrategy.TYPE_HIERARCHY).stream(ExtendWith.class)
              .map(MergedAnnotation::synthesize)
              .anyMatch(e -> Arrays.asList(e.value()).contains(WirelintExtension.class));
      if (found) {
        return true;
      }
    }
    return false;
  }

  /** One for every class with the extension: equal to each other, so they share contexts. */
  static final class Customizer implements ContextCustomizer {
    private final String testClass;

    Customizer(String testClass) {
      this.testClass = testClass;
    }

    @Override
    public void customizeContext(ConfigurableApplicationContext context, MergedContextConfiguration merged) {
      check(testClass, context.getEnvironment(), Session.running());
    }

    /** Fails when a repointed property of the context's environment is not wirelint's URI. */
    static void check(String testClass, Environment environment, Session.Running running) {
      if (running == null) {
        return;
      }
      for (String name : running.properties()) {
        String value = environment.getProperty(name);
        if (value != null && !value.equals(running.uri())) {
          throw new IllegalStateException(
              "wirelint: the Spring context of "
                  + testClass
                  + " has "
                  + name
                  + " pointing elsewhere than wirelint ("
                  + ClientUri.redacted(value)
                  + "), set by the test's own configuration: its traffic would bypass wirelint. Remove that"
                  + " setting, or use Wirelint.uri() where it is set (@DynamicPropertySource)");
        }
      }
    }

    @Override
    public boolean equals(Object other) {
      return other instanceof Customizer;
    }

    @Override
    public int hashCode() {
      return Customizer.class.getName().hashCode();
    }
  }
}
